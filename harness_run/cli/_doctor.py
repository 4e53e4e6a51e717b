"""``harness-run doctor``: which harness CLIs this machine has, their versions against our pins, and
one loopback smoke turn per harness against the scripted model (no key, no network).

Exit code 0 when every checked harness is installed and its smoke turn passed, else 1. A version
that differs from the pin is reported (``differs``) but is not a failure on its own.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
import time
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["HarnessCheck", "diagnose", "register"]

_HARNESSES = ("claude-code", "codex", "opencode")
_VERSION = re.compile(r"\d+\.\d+\.\d+(?:[-.][0-9A-Za-z.]+)?")
_NO_RETRIES = {"CLAUDE_CODE_MAX_RETRIES": "0", "HARNESS_RUN_CODEX_MAX_RETRIES": "0"}


@dataclass
class HarnessCheck:
    """One harness's line in the report."""

    harness: str
    path: str | None = None
    version: str | None = None
    """What the CLI says (``--version``)."""
    pin: str = ""
    pinned_version: str | None = None
    version_ok: bool | None = None
    """True when the installed version is the pinned one; None when it cannot be told."""
    smoke: str = "skipped"
    """``passed``, ``failed``, ``skipped`` (not installed, or ``--no-smoke``)."""
    smoke_seconds: float | None = None
    detail: str = ""

    @property
    def ok(self) -> bool:
        return self.path is not None and self.smoke != "failed"


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "doctor",
        help="check the harness CLIs: installed, versions vs pins, one loopback smoke turn each",
        description="For each harness: where its CLI is, its version against harness-run's pin, and "
        "one real turn against the built-in scripted model on 127.0.0.1 (no key, no network). "
        "Exits 1 when a harness is missing or its smoke turn fails.",
    )
    parser.add_argument(
        "--harness",
        action="append",
        choices=_HARNESSES,
        help="check only this harness (repeatable; default: all three)",
    )
    parser.add_argument("--no-smoke", action="store_true", help="skip the smoke turns")
    parser.add_argument(
        "--timeout", type=float, default=180.0, help="seconds each smoke turn may take (default: 180)"
    )
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(func=_handler)


def _handler(args: argparse.Namespace) -> int:
    harnesses = tuple(dict.fromkeys(args.harness or _HARNESSES))
    checks = asyncio.run(diagnose(harnesses, smoke=not args.no_smoke, timeout=args.timeout))
    if args.json:
        payload = {"ok": all(c.ok for c in checks), "harnesses": [asdict(c) for c in checks]}
        print(json.dumps(payload, indent=2))
    else:
        print(_table(checks))
    return 0 if all(c.ok for c in checks) else 1


async def diagnose(
    harnesses: tuple[str, ...], *, smoke: bool = True, timeout: float = 180.0
) -> list[HarnessCheck]:
    """Check each harness: locate, version vs pin, then (``smoke``) all smoke turns concurrently."""
    checks = [await _inspect(h) for h in harnesses]
    if smoke:
        await asyncio.gather(*(_smoke(c, timeout) for c in checks if c.path is not None))
    return checks


async def _inspect(harness: str) -> HarnessCheck:
    from harness_run.errors import HarnessNotFoundError
    from harness_run.harness import get_driver
    from harness_run.vocab.pins import HARNESS_CLI_PINS

    pin = HARNESS_CLI_PINS[harness]
    check = HarnessCheck(harness=harness, pin=pin, pinned_version=_version_of(pin.rsplit("@", 1)[-1]))
    try:
        check.path = get_driver(harness).locate()
    except HarnessNotFoundError as exc:
        check.detail = str(exc)
        return check
    check.version = await _cli_version(check.path)
    installed = check.version
    if harness == "claude-code":  # pinned as the wheel that bundles the CLI: compare the wheel
        from importlib.metadata import PackageNotFoundError, version

        check.pinned_version = _version_of(pin.split("==", 1)[-1])
        bundled = "claude_agent_sdk" in check.path
        try:
            installed = version("claude-agent-sdk") if bundled else None
        except PackageNotFoundError:
            installed = None
        if installed is not None:
            check.detail = f"claude-agent-sdk {installed}"
    if installed is not None and check.pinned_version is not None:
        check.version_ok = installed == check.pinned_version
    return check


def _version_of(text: str) -> str | None:
    match = _VERSION.search(text)
    return match.group(0) if match else None


async def _cli_version(path: str) -> str | None:
    try:
        proc = await asyncio.create_subprocess_exec(
            path,
            "--version",
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError:
        return None
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 30)
    except TimeoutError:
        from harness_run.runtime import kill_tree

        await kill_tree(proc, grace=0.5)
        return None
    return _version_of(out.decode(errors="replace"))


async def _smoke(check: HarnessCheck, timeout: float) -> None:
    from harness_run import AgentSpec
    from harness_run.runtime.local import LocalEngine
    from harness_run.testing import ScriptedModel, text
    from harness_run.vocab.models import DEFAULT_MODELS

    marker = f"doctor-ok-{check.harness}"
    started = time.monotonic()
    with (
        tempfile.TemporaryDirectory(prefix="harness-run-doctor-") as workdir,
        ScriptedModel([text(marker)]) as model,
    ):
        spec = AgentSpec(
            name="doctor",
            harness=check.harness,  # type: ignore[arg-type]
            model=DEFAULT_MODELS[check.harness],
            env=_NO_RETRIES,
            timeout=timeout,
        )
        if check.harness == "claude-code":
            secrets = {"ANTHROPIC_BASE_URL": model.url, "ANTHROPIC_API_KEY": "doctor-dummy-key"}
        else:
            secrets = {"OPENAI_BASE_URL": model.openai_url, "OPENAI_API_KEY": "doctor-dummy-key"}
        engine = LocalEngine(spec, workdir=workdir)
        try:
            result = await engine.start_session().run("Say the marker.", secrets=secrets)
        except Exception as exc:  # report it, never crash the doctor
            check.smoke, check.detail = "failed", _join(check.detail, f"{type(exc).__name__}: {exc}")
            return
        finally:
            engine.close()
    check.smoke_seconds = round(time.monotonic() - started, 2)
    if result.is_error or result.text.strip() != marker:
        check.smoke = "failed"
        reason = result.error or f"unexpected answer {result.text[:80]!r}"
        check.detail = _join(check.detail, reason.strip().splitlines()[0][:300] if reason.strip() else reason)
    else:
        check.smoke = "passed"


def _join(first: str, second: str) -> str:
    return "; ".join(part for part in (first, second) if part)


def _table(checks: list[HarnessCheck]) -> str:
    rows = [("HARNESS", "VERSION", "PIN", "SMOKE", "PATH / DETAIL")]
    for c in checks:
        if c.path is None:
            version = "not found"
        elif c.version_ok is None:
            version = c.version or "?"
        else:
            version = f"{c.version or '?'} ({'pinned' if c.version_ok else 'differs'})"
        smoke = c.smoke if c.smoke_seconds is None else f"{c.smoke} {c.smoke_seconds:.1f}s"
        where = c.path or ""
        rows.append((c.harness, version, c.pin, smoke, _join(where, c.detail)))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = [
        "  ".join(cell.ljust(w) for cell, w in zip(r[:4], widths, strict=True)) + "  " + r[4] for r in rows
    ]
    failed = [c.harness for c in checks if not c.ok]
    lines.append("")
    lines.append(f"FAILED: {', '.join(failed)}" if failed else "all harnesses OK")
    return "\n".join(lines)
