"""The compiled build context as an E2B template (the SDK's Dockerfile template build).

The template's name is the engine's and its version (``hr-<engine>-<short digest>``), so a
redeploy of an unchanged spec finds it (``AsyncTemplate.exists``) and builds nothing. Its steps are
the compiled Dockerfile's (parsed by the SDK, ``COPY`` sources uploaded from the context), then
``USER root`` and the start command that waits for a claim's settings (see ``_sandboxes``).
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from harness_run.compiler import SHORT_DIGEST_LEN, BuildPlan
from harness_run.errors import InfrastructureError
from harness_run.runtime.e2b._sandboxes import START_CMD, why_of

__all__ = ["ensure_template", "template_name"]

_ARG = re.compile(r"(?m)^ARG (HARNESS_RUN_DIGEST)\s*$")


def template_name(plan: BuildPlan) -> str:
    """``hr-<engine>-<short digest>``: E2B template names are lowercase letters, digits and dashes."""
    engine = re.sub(r"[^a-z0-9-]+", "-", plan.engine.lower()).strip("-")[:40] or "engine"
    return f"hr-{engine}-{plan.digest[:SHORT_DIGEST_LEN]}"


def dockerfile_of(plan: BuildPlan) -> str:
    """The compiled Dockerfile with the digest build-arg's value filled in (E2B takes no build args)."""
    text = plan.files["Dockerfile"].decode()
    return _ARG.sub(lambda m: f"ARG {m.group(1)}={plan.digest}", text)


async def ensure_template(
    plan: BuildPlan,
    connection: Mapping[str, Any],
    *,
    progress: Callable[[str], None] | None = None,
) -> tuple[str, bool]:
    """The template of ``plan`` on E2B, built unless it exists: (its name, whether it was built)."""
    from e2b import AsyncTemplate

    name = template_name(plan)
    try:
        if await AsyncTemplate.exists(name, **connection):
            return name, False
    except Exception as exc:
        why = why_of(exc)
        raise InfrastructureError(f"cannot ask E2B about template {name!r}: {why}", retryable=True) from None
    with tempfile.TemporaryDirectory(prefix="hr-e2b-") as tmp:
        context = Path(tmp)
        for path, data in plan.files.items():
            target = context / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
            target.chmod(plan.mode(path))
        template = (
            AsyncTemplate(file_context_path=str(context))
            .from_dockerfile(dockerfile_of(plan))
            .set_user("root")
            .set_start_cmd(START_CMD, "true")
        )

        def log(entry: Any) -> None:
            if progress is not None:
                progress(str(getattr(entry, "message", entry)))

        try:
            await AsyncTemplate.build(template, name, on_build_logs=log, **connection)
        except Exception as exc:
            raise InfrastructureError(f"E2B could not build template {name!r}: {why_of(exc)}") from None
    return name, True
