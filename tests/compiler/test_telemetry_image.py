"""``ImageOptions(telemetry=True)``: the image's requirements gain the pinned OpenTelemetry packages
(the ``otel`` extra), which changes the digest; without it nothing changes."""

from __future__ import annotations

from importlib.metadata import requires

from packaging.requirements import Requirement

from harness_run import AgentSpec
from harness_run.compiler import ImageOptions, compile
from harness_run.vocab import pins

SPEC = AgentSpec(name="img-otel", harness="claude-code", model="claude-sonnet-4-6")


def test_telemetry_adds_the_pinned_packages_and_changes_the_digest() -> None:
    plain = compile(SPEC)
    off = compile(SPEC, image=ImageOptions(telemetry=False))
    on = compile(SPEC, image=ImageOptions(telemetry=True))
    assert off.digest == plain.digest
    assert on.digest != plain.digest
    assert plain.files["requirements/harness-run.txt"].decode().split() == list(pins.IMAGE_REQUIREMENTS)
    lines = on.files["requirements/harness-run.txt"].decode().split()
    assert lines == [*pins.IMAGE_REQUIREMENTS, *pins.OTEL_REQUIREMENTS]


def test_otel_pins_satisfy_the_otel_extra() -> None:
    declared = [Requirement(r) for r in requires("harness-run") or []]
    extra = {
        r.name.lower(): r for r in declared if r.marker is not None and r.marker.evaluate({"extra": "otel"})
    }
    pinned = {Requirement(r).name.lower(): Requirement(r) for r in pins.OTEL_REQUIREMENTS}
    assert sorted(pinned) == sorted(extra)
    for name, requirement in extra.items():
        (version,) = [s.version for s in pinned[name].specifier]
        assert requirement.specifier.contains(version), (
            f"pin {version} of {name} violates {requirement.specifier}"
        )
