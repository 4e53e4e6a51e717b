"""``compile_server(…) -> BuildPlan``: the team server's image (``harness-run serve deploy``), through the
same deterministic path as an agent image: a build context of sorted files, a digest over them.

The image holds the agent image's base layers, the harness CLIs its engines need, the library and
the specs it serves; its command is ``harness-run serve --host 0.0.0.0 --port $PORT --serve-recorded
--store $HARNESS_RUN_STORE``. The store, the port and everything about the Cloud Run service are settings of
the service, not of the image: they do not enter the digest.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from types import MappingProxyType
from typing import Final

from harness_run.compiler import _context as ctx
from harness_run.compiler._compile import read_ca, requirements_text
from harness_run.compiler._options import ImageOptions
from harness_run.compiler._plan import SHORT_DIGEST_LEN, BuildPlan, context_digest
from harness_run.errors import UsageError
from harness_run.spec import AgentSpec
from harness_run.vocab import pins

__all__ = ["SERVER_IMAGE_NAME", "SERVER_PORT", "compile_server"]

SERVER_IMAGE_NAME: Final = "harness-run-server"
"""The server image's repository name under the registry: ``<registry>/harness-run-server:<short>``."""
SERVER_PORT: Final = 8080
"""The port the server listens on when ``$PORT`` is not set (Cloud Run sets it; 8080 by default)."""
SPECS_DIR: Final = f"{ctx.ROOT}/specs"


def _command(spec_names: Sequence[str]) -> str:
    """The image's CMD: a shell (for ``$PORT`` and ``$HARNESS_RUN_STORE``) exec'ing ``harness-run serve``.
    0.0.0.0 is where a container must listen to be reached; nothing outside a container binds it."""
    # the store is the deployment's own: every engine deployed into it is served
    words = [
        "exec harness-run serve --host 0.0.0.0",
        f'--port "${{PORT:-{SERVER_PORT}}}"',
        "--serve-recorded",
    ]
    words.append(
        '--store "${HARNESS_RUN_STORE:?set HARNESS_RUN_STORE to the history store, gs://bucket/prefix}"'
    )
    words += [f"--spec {shlex.quote(f'{SPECS_DIR}/{name}.json')}" for name in spec_names]
    return json.dumps(["sh", "-c", " ".join(words)])


def compile_server(
    *,
    specs: Sequence[AgentSpec] = (),
    harnesses: Sequence[str] = (),
    image: ImageOptions | None = None,
) -> BuildPlan:
    """Compile the server image: ``specs`` are baked in and served (besides the engines recorded in
    the store); ``harnesses`` are the CLIs to install (the specs' own harnesses are always added;
    with neither, Claude Code). Pure: same inputs + same library -> same context and digest."""
    image = image if image is not None else ImageOptions()
    names = [spec.name for spec in specs]
    if len(set(names)) != len(names):
        raise UsageError(f"two specs share a name ({sorted(names)}); each served engine needs its own name")
    for spec in specs:
        local = [s.staged_name for s in spec.skills if s.kind == "local"]
        if local:
            raise UsageError(
                f"spec {spec.name!r} has local skills {local}: a served spec reads its skills where the "
                "server runs; use git skills (SkillSource.git) for a deployed server"
            )
    wanted = set(harnesses)
    for spec in specs:
        wanted.update(spec.harnesses)
    unknown = sorted(wanted - set(pins.HARNESS_CLI_PINS))
    if unknown:
        raise UsageError(f"unknown harness {unknown}; choose from {sorted(pins.HARNESS_CLI_PINS)}")
    chosen = tuple(sorted(wanted or {"claude-code"}))
    from harness_run.vocab.version import __version__

    files: dict[str, bytes] = {}
    for path in image.ca_files:
        data = read_ca(Path(path))
        files[ctx.ca_context_name(data)] = data
    files.update(ctx.library_files())
    files["bin/harness-run"] = ctx.LAUNCHER.encode()
    files["requirements/harness-run.txt"] = requirements_text(pins.IMAGE_REQUIREMENTS)
    for spec in specs:
        files[f"specs/{spec.name}.json"] = ctx.canonical_json(spec.to_dict())
    files["lock.json"] = ctx.lock_json(
        version=__version__, harnesses=chosen, base_image=image.base_image, skills=[]
    )
    values = ctx.dockerfile_values(
        engine=SERVER_IMAGE_NAME,
        harnesses=chosen,
        base_image=image.base_image,
        system_packages=(),
        has_ca=bool(image.ca_files),
        has_agent_packages=False,
        has_skills=False,
    )
    files["Dockerfile"] = ctx.render_template(
        "server.Dockerfile.j2",
        **asdict(values),
        specs_dir="specs" if specs else None,
        server_port=SERVER_PORT,
        server_command=_command(sorted(names)),
    ).encode()

    ordered = MappingProxyType({path: files[path] for path in sorted(files)})
    executables = frozenset({"bin/harness-run"})
    digest = context_digest(pins.BUILDER_VERSION, ordered, executables)
    return BuildPlan(
        engine=SERVER_IMAGE_NAME,
        digest=digest,
        files=ordered,
        executables=executables,
        manifests=(),
        pinned_skills=(),
        image=f"{image.repository(SERVER_IMAGE_NAME)}:{digest[:SHORT_DIGEST_LEN]}",
        base_image=image.base_image,
        harnesses=chosen,
        network_mode=image.build_network,
        build_args=BuildPlan.build_args_for(digest),
    )
