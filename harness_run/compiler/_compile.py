"""``compile(spec, …) -> BuildPlan``: pure apart from staging skills and reading the library's files.

Same spec + same library + same options that reach the image (``ImageOptions.base_image`` and
``.ca_files``) give a byte-identical context and the same digest on any machine, in any working
directory: no clock, no environment reads, sorted everything, fixed modes. Options that only shape
the manifests (:class:`PodOptions`, namespace, pool size, the registry) or the build (its network)
are not part of the digest: they do not change the image.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from types import MappingProxyType

from harness_run import telemetry
from harness_run.compiler import _context as ctx
from harness_run.compiler._manifests import ManifestInputs, build_manifests, worker_hosts
from harness_run.compiler._options import ImageOptions, PodOptions
from harness_run.compiler._plan import SHORT_DIGEST_LEN, BuildPlan, context_digest
from harness_run.compiler._skills import stage_skills
from harness_run.errors import SpecError, SpecIssue, UsageError
from harness_run.harness import harness_files, mcp_secret_env
from harness_run.spec import AgentSpec, StdioMcpServer
from harness_run.vocab import pins

__all__ = ["compile", "read_ca", "requirements_text"]


@telemetry.traced("harness_run.compile")
def compile(
    spec: AgentSpec,
    *,
    image: ImageOptions | None = None,
    pods: PodOptions | None = None,
    namespace: str = "default",
    pool_size: int = 1,
    base_dir: str | Path | None = None,
) -> BuildPlan:
    """Compile ``spec`` into an image build context, Kubernetes manifests and a content digest.

    - ``image``: what goes into the image and where it goes (:class:`ImageOptions`: base image, CA
      files, build network, registry); default ``ImageOptions()``.
    - ``pods``: how the sandbox pods run (:class:`PodOptions`: runtime class, Google service
      account, non-secret env); default ``PodOptions()``. Not in the digest.
    - ``namespace``, ``pool_size``: of the manifests (the warm pool's replicas). Not in the digest.
    - ``base_dir``: what relative local-skill paths are resolved against (default: the cwd).
    """
    image = image if image is not None else ImageOptions()
    pods = pods if pods is not None else PodOptions()
    if isinstance(pool_size, bool) or pool_size < 0:
        raise UsageError(f"pool_size must be a whole number >= 0, not {pool_size!r}")
    if not namespace or not _DNS_LABEL.fullmatch(namespace):
        raise UsageError(f"namespace {namespace!r} is not a Kubernetes namespace name (e.g. 'agents')")
    _check_secret_env_names(spec)
    from harness_run.vocab.version import __version__

    files: dict[str, bytes] = {}
    executables: set[str] = set()
    for path in image.ca_files:
        data = read_ca(Path(path))
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
    otel = pins.OTEL_REQUIREMENTS if image.telemetry else ()
    files["requirements/harness-run.txt"] = requirements_text(pins.IMAGE_REQUIREMENTS + otel)
    if spec.packages:
        files["requirements/agent.txt"] = requirements_text(sorted(set(spec.packages)))
    files["spec.json"] = ctx.canonical_json(spec.to_dict())
    files["lock.json"] = ctx.lock_json(
        version=__version__,
        harnesses=spec.harnesses,
        base_image=image.base_image,
        skills=[p.to_dict() for p in pinned],
    )
    values = ctx.dockerfile_values(
        engine=spec.name,
        harnesses=spec.harnesses,
        base_image=image.base_image,
        system_packages=spec.system_packages,
        has_ca=bool(image.ca_files),
        has_agent_packages=bool(spec.packages),
        has_skills=bool(staged),
    )
    files["Dockerfile"] = ctx.render_dockerfile(values).encode()

    ordered = MappingProxyType({path: files[path] for path in sorted(files)})
    frozen_exec = frozenset(executables)
    digest = context_digest(pins.BUILDER_VERSION, ordered, frozen_exec)
    short = digest[:SHORT_DIGEST_LEN]
    tag = f"{image.repository(spec.name)}:{short}"
    manifests = build_manifests(
        ManifestInputs(
            engine=spec.name,
            digest=digest,
            short=short,
            image=tag,
            harnesses=spec.harnesses,
            resources=spec.resources,
            network=spec.network,
            runtime_class=pods.runtime_class,
            namespace=namespace,
            pool_size=pool_size,
            pod_env=pods.env_items,
            gcp_service_account=pods.gcp_service_account,
            worker_hosts=worker_hosts(spec, pods.env_items),
        )
    )
    return BuildPlan(
        engine=spec.name,
        digest=digest,
        files=ordered,
        executables=frozen_exec,
        manifests=manifests,
        pinned_skills=pinned,
        image=tag,
        base_image=image.base_image,
        harnesses=spec.harnesses,
        network_mode=image.build_network,
        build_args=BuildPlan.build_args_for(digest),
    )


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def read_ca(path: Path) -> bytes:
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise UsageError(
            f"cannot read CA file {path}: {exc.strerror or exc}; pass a PEM certificate file"
        ) from None
    if b"-----BEGIN CERTIFICATE-----" not in data:
        raise UsageError(f"CA file {path} holds no PEM certificate (-----BEGIN CERTIFICATE-----)")
    return data


def requirements_text(lines: Sequence[str]) -> bytes:
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
