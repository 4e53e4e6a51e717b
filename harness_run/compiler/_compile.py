"""``compile(spec, …) -> BuildPlan``: pure apart from staging skills and reading the library's files.

Same spec + same library + same parameters that reach the image (base image, CA files) give a
byte-identical context and the same digest on any machine, in any working directory: no clock,
no environment reads, sorted everything, fixed modes. Parameters that only shape the manifests
(runtime class, namespace, pool size, image repository) or the build (network mode) are not part
of the digest: they do not change the image.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType

from harness_run.compiler import _context as ctx
from harness_run.compiler._manifests import ManifestInputs, build_manifests
from harness_run.compiler._plan import SHORT_DIGEST_LEN, BuildPlan, context_digest
from harness_run.compiler._skills import stage_skills
from harness_run.errors import SpecError, SpecIssue, UsageError
from harness_run.harness import harness_files, mcp_secret_env
from harness_run.spec import AgentSpec, StdioMcpServer
from harness_run.vocab import pins

__all__ = ["compile"]


def compile(
    spec: AgentSpec,
    *,
    base_image: str = pins.DEFAULT_BASE_IMAGE,
    ca_files: Sequence[str | Path] = (),
    build_network: str | None = None,
    runtime_class: str | None = "gvisor",
    image_repository: str | None = None,
    namespace: str = "default",
    pool_size: int = 1,
    base_dir: str | Path | None = None,
    pod_env: Mapping[str, str] | None = None,
    gcp_service_account: str | None = None,
) -> BuildPlan:
    """Compile ``spec`` into an image build context, Kubernetes manifests and a content digest.

    - ``base_image``: the image to build on (Debian-based, with ``python3`` and ``python3-venv``).
    - ``ca_files``: extra CA certificates (PEM) trusted by the build steps and inside the image.
    - ``build_network``: Docker network mode for the build (e.g. ``"host"``); not in the digest.
    - ``runtime_class``: the pods' ``runtimeClassName`` (``None`` for the cluster default).
    - ``image_repository``: where the image goes; default ``harness-run/<spec.name>``.
    - ``namespace``, ``pool_size``: of the manifests (the warm pool's replicas).
    - ``base_dir``: what relative local-skill paths are resolved against (default: the cwd).
    - ``pod_env``: non-secret environment of the sandbox container (the worker's
      ``HARNESS_RUN_STORE``, ``HARNESS_RUN_VERTEX_PROJECT``/``_REGION``…); not in the digest.
    - ``gcp_service_account``: the Google service account the pods act as (GKE Workload Identity
      annotation on the engine's ServiceAccount); not in the digest.
    """
    if isinstance(pool_size, bool) or pool_size < 0:
        raise UsageError(f"pool_size must be a whole number >= 0, not {pool_size!r}")
    if not base_image.strip():
        raise UsageError("base_image must name an image, e.g. 'python:3.12-slim-bookworm'")
    _check_secret_env_names(spec)
    env_items = _check_pod_env(pod_env or {})
    if gcp_service_account is not None and not _GSA.fullmatch(gcp_service_account):
        raise UsageError(
            f"gcp_service_account {gcp_service_account!r} is not a Google service account email; "
            "use e.g. 'agents@my-project.iam.gserviceaccount.com'"
        )
    from harness_run.vocab.version import __version__

    files: dict[str, bytes] = {}
    executables: set[str] = set()
    for path in ca_files:
        data = _read_ca(Path(path))
        files[ctx.ca_context_name(data)] = data

    staged, pinned = stage_skills(spec.skills, Path(base_dir) if base_dir is not None else Path.cwd())
    for name, item in staged.items():
        files[name] = item.data
        if item.executable:
            executables.add(name)

    for harness in spec.harnesses:
        for name, text in harness_files(spec, harness).items():
            files[f"config/{harness}/{name}"] = text.encode()

    files.update(ctx.library_files())
    files["bin/harness-run"] = ctx.LAUNCHER.encode()
    executables.add("bin/harness-run")
    files["requirements/harness-run.txt"] = _requirements(pins.IMAGE_REQUIREMENTS)
    if spec.packages:
        files["requirements/agent.txt"] = _requirements(sorted(set(spec.packages)))
    files["spec.json"] = ctx.canonical_json(spec.to_dict())
    files["lock.json"] = ctx.lock_json(
        version=__version__,
        harnesses=spec.harnesses,
        base_image=base_image,
        skills=[p.to_dict() for p in pinned],
    )
    values = ctx.dockerfile_values(
        engine=spec.name,
        harnesses=spec.harnesses,
        base_image=base_image,
        system_packages=spec.system_packages,
        has_ca=bool(ca_files),
        has_agent_packages=bool(spec.packages),
        has_skills=bool(staged),
    )
    files["Dockerfile"] = ctx.render_dockerfile(values).encode()

    ordered = MappingProxyType({path: files[path] for path in sorted(files)})
    frozen_exec = frozenset(executables)
    digest = context_digest(pins.BUILDER_VERSION, ordered, frozen_exec)
    short = digest[:SHORT_DIGEST_LEN]
    image = f"{image_repository or f'harness-run/{spec.name}'}:{short}"
    manifests = build_manifests(
        ManifestInputs(
            engine=spec.name,
            digest=digest,
            short=short,
            image=image,
            harnesses=spec.harnesses,
            resources=spec.resources,
            network=spec.network,
            runtime_class=runtime_class,
            namespace=namespace,
            pool_size=pool_size,
            pod_env=env_items,
            gcp_service_account=gcp_service_account,
        )
    )
    return BuildPlan(
        engine=spec.name,
        digest=digest,
        files=ordered,
        executables=frozen_exec,
        manifests=manifests,
        pinned_skills=pinned,
        image=image,
        base_image=base_image,
        harnesses=spec.harnesses,
        network_mode=build_network,
        build_args=BuildPlan.build_args_for(digest),
    )


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_GSA = re.compile(r"[a-z0-9][a-z0-9._-]*@[a-z0-9][a-z0-9.-]*\.gserviceaccount\.com")
_SECRET_WORDS = re.compile(r"(^|_)(KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?|AUTH)(_|$)")


def _check_pod_env(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """Non-secret container settings only: secrets travel per run, never in a manifest."""
    from harness_run.spec import looks_like_credential

    for name, value in env.items():
        if not isinstance(name, str) or not _ENV_NAME.fullmatch(name):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise UsageError(
                f"pod_env name {name!r} is not an environment variable name (letters, digits, _)"
            )
        if not isinstance(value, str):  # pyright: ignore[reportUnnecessaryIsInstance]
            raise UsageError(f"pod_env[{name!r}] must be a string, not {type(value).__name__}")
        if _SECRET_WORDS.search(name.upper()) or looks_like_credential(value):
            raise UsageError(
                f"pod_env[{name!r}] looks like a credential; manifests hold no secrets: pass it per "
                "run with secrets={...} (sandbox pods get Google credentials from Workload Identity)"
            )
    return tuple(sorted(env.items()))


def _read_ca(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(
            f"cannot read CA file {path}: {exc.strerror or exc}; pass a PEM certificate file"
        ) from None
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise UsageError(f"CA file {path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    return data


def _requirements(lines: Sequence[str]) -> bytes:
    return ("".join(f"{line}\n" for line in lines)).encode()


def _check_secret_env_names(spec: AgentSpec) -> None:
    """Two MCP secret entries must not map to the same ``HARNESS_RUN_MCP_*`` variable."""
    seen: dict[str, str] = {}
    for i, server in enumerate(spec.mcp_servers):
        keys = server.env_secrets if isinstance(server, StdioMcpServer) else server.header_secrets
        for key in keys:
            env = mcp_secret_env(server.name, key)
            where = f"mcp_servers[{i}]"
            if env in seen:
                raise SpecError(
                    [
                        SpecIssue(
                            where,
                            f"{server.name!r}/{key!r} and {seen[env]} both map to the "
                            f"environment variable {env}",
                            "rename one of the servers or keys",
                        )
                    ]
                )
            seen[env] = f"{server.name!r}/{key!r}"
