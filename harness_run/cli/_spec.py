"""``harness-run validate | compile | schema``: the spec noun."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness_run.errors import SpecError, UsageError

if TYPE_CHECKING:
    from harness_run.spec import AgentSpec

__all__ = ["register"]


def register(sub: Any) -> None:
    validate = sub.add_parser(
        "validate",
        help="check spec files; exit 2 on the first invalid one",
        description="Validate spec files (YAML or JSON).",
    )
    validate.add_argument("specs", nargs="+", metavar="SPEC", type=Path)
    validate.set_defaults(func=_validate)

    comp = sub.add_parser(
        "compile",
        help="compile a spec into an image build context and manifests",
        description="Write DIR/context/ (the image build context), DIR/manifests.yaml "
        "and DIR/digest (the engine version).",
    )
    comp.add_argument("spec", metavar="SPEC", type=Path)
    comp.add_argument("--out", required=True, type=Path, metavar="DIR")
    comp.add_argument(
        "--base-image",
        metavar="IMAGE",
        default=None,
        help="image to build on (default: the builder's pinned python slim image)",
    )
    comp.add_argument(
        "--ca-file",
        action="append",
        default=[],
        type=Path,
        metavar="FILE",
        help="extra CA certificate (PEM) to trust during the build and in the image",
    )
    comp.add_argument(
        "--runtime-class",
        default="gvisor",
        metavar="NAME",
        help="pods' runtimeClassName, or 'none' (default: %(default)s)",
    )
    comp.add_argument("--pool-size", type=int, default=1, metavar="N", help="warm pool replicas")
    comp.add_argument("--namespace", default="default", help="namespace of the manifests")
    comp.add_argument(
        "--registry",
        default=None,
        metavar="PREFIX",
        help="where the image goes: it is tagged PREFIX/<name>:<digest> (default: harness-run)",
    )
    comp.set_defaults(func=_compile)

    schema = sub.add_parser(
        "schema",
        help="print the JSON Schema of spec files",
        description="Print the JSON Schema of spec files (for editor completion).",
    )
    schema.add_argument("--out", type=Path, metavar="FILE", help="write to FILE instead of stdout")
    schema.set_defaults(func=_schema)


def _load(path: Path) -> AgentSpec:
    from harness_run.spec import AgentSpec

    if not path.is_file():
        raise UsageError(f"spec file {path} not found" if not path.exists() else f"{path} is not a file")
    return AgentSpec.from_yaml(path)


def _validate(args: argparse.Namespace) -> int:
    for path in args.specs:
        try:
            spec = _load(path)
        except SpecError as exc:
            raise SpecError(exc.issues, source=exc.source or str(path)) from None
        count = len(spec.secret_names)
        names = ", ".join(spec.secret_names) or "none"
        plural = "" if count == 1 else "s"
        print(f"ok: {spec.name} ({spec.harness}, {spec.model}) — {count} secret{plural}: {names}")
    return 0


def _compile(args: argparse.Namespace) -> int:
    from harness_run.compiler import DEFAULT_BASE_IMAGE, ImageOptions, PodOptions, compile

    spec = _load(args.spec)
    started = time.perf_counter()
    image = ImageOptions(
        base_image=args.base_image or DEFAULT_BASE_IMAGE, ca_files=args.ca_file, registry=args.registry
    )
    runtime_class = None if args.runtime_class.lower() == "none" else args.runtime_class
    plan = compile(
        spec,
        image=image,
        pods=PodOptions(runtime_class=runtime_class),
        pool_size=args.pool_size,
        namespace=args.namespace,
        base_dir=args.spec.resolve().parent,
    )
    plan.write(args.out)
    elapsed = (time.perf_counter() - started) * 1000
    print(f"digest: {plan.digest}")
    print(f"image: {plan.image}")
    print(
        f"files: {len(plan.files)} in {args.out / 'context'}; manifests: {len(plan.manifests)} "
        f"in {args.out / 'manifests.yaml'}"
    )
    for pin in plan.pinned_skills:
        print(f"skill {pin.name}: {pin.url} @ {pin.commit}")
    print(f"compiled in {elapsed:.0f} ms")
    return 0


def _schema(args: argparse.Namespace) -> int:
    from harness_run.spec import AgentSpec

    text = json.dumps(AgentSpec.json_schema(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text, encoding="utf-8")
        print(f"wrote {args.out}")
    return 0
