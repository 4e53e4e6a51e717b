"""``BuildPlan``: the compiled form of a spec — build context, manifests, digest — and its writers."""

from __future__ import annotations

import hashlib
import io
import shutil
import tarfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol, cast

from harness_run.compiler._context import DIGEST_ARG, GENERATED
from harness_run.compiler._skills import PinnedSkill
from harness_run.errors import UsageError

__all__ = ["SHORT_DIGEST_LEN", "BuildPlan", "context_digest"]

SHORT_DIGEST_LEN: Final = 12
FILE_MODE: Final = 0o644
EXEC_MODE: Final = 0o755


class _YamlDumpAll(Protocol):
    """``yaml.safe_dump_all`` as used here (the stubs' ``width`` type does not resolve)."""

    def safe_dump_all(
        self,
        documents: Iterable[object],
        *,
        sort_keys: bool,
        explicit_start: bool,
        default_flow_style: bool,
        allow_unicode: bool,
        width: int,
    ) -> str: ...


def context_digest(builder_version: str, files: Mapping[str, bytes], executables: frozenset[str]) -> str:
    """sha256 over the builder version and every (path, mode, content hash), in path order."""
    h = hashlib.sha256(f"harness-run build context, builder {builder_version}\n".encode())
    for path in sorted(files):
        mode = EXEC_MODE if path in executables else FILE_MODE
        h.update(f"{path}\0{mode:o}\0{hashlib.sha256(files[path]).hexdigest()}\n".encode())
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class BuildPlan:
    """The output of :func:`harness_run.compiler.compile`. Treat every field as read-only.

    - ``digest``: sha256 (hex) of the build context and the builder version — the engine version;
      ``short`` is its first 12 characters (image tag, object names).
    - ``files``: the build context, relative POSIX path -> bytes, in path order; ``executables``
      the paths built with mode 0755 (all others 0644).
    - ``manifests``: Kubernetes objects in apply order (see ``_manifests``).
    - ``pinned_skills``: each git skill with the commit it was read at.
    - ``image``: ``repository:<short digest>``; ``build_args`` and ``network_mode`` are for the build.
    """

    engine: str
    digest: str
    files: Mapping[str, bytes]
    executables: frozenset[str]
    manifests: tuple[dict[str, Any], ...]
    pinned_skills: tuple[PinnedSkill, ...]
    image: str
    base_image: str
    harnesses: tuple[str, ...]
    network_mode: str | None = None
    build_args: Mapping[str, str] = field(default_factory=dict[str, str])

    @property
    def short(self) -> str:
        return self.digest[:SHORT_DIGEST_LEN]

    @property
    def dockerfile(self) -> str:
        return self.files["Dockerfile"].decode()

    @property
    def spec_json(self) -> str:
        return self.files["spec.json"].decode()

    def mode(self, path: str) -> int:
        return EXEC_MODE if path in self.executables else FILE_MODE

    @staticmethod
    def build_args_for(digest: str) -> dict[str, str]:
        return {DIGEST_ARG: digest}

    def manifests_yaml(self) -> str:
        """All manifests as one multi-document YAML stream (sorted keys, stable)."""
        import yaml

        return cast("_YamlDumpAll", yaml).safe_dump_all(
            list(self.manifests),
            sort_keys=True,
            explicit_start=True,
            default_flow_style=False,
            allow_unicode=True,
            width=100,
        )

    def context_tar(self) -> bytes:
        """The context as an uncompressed tar: sorted, mtime 0, uid/gid 0, fixed modes."""
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for path in sorted(self.files):
                data = self.files[path]
                info = tarfile.TarInfo(path)
                info.size = len(data)
                info.mode = self.mode(path)
                info.mtime = 0
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                tar.addfile(info, io.BytesIO(data))
        return buffer.getvalue()

    def write(self, directory: str | Path) -> Path:
        """Write ``context/``, ``manifests.yaml`` and ``digest`` under ``directory``.

        A ``context/`` left by an earlier compile is replaced; any other non-empty ``context/``
        is refused rather than deleted.
        """
        out = Path(directory)
        context = out / "context"
        if context.exists():
            previous = context / "Dockerfile"
            ours = previous.is_file() and GENERATED in previous.read_text(errors="replace")[:200]
            if not ours and any(context.iterdir()):
                raise UsageError(
                    f"{context} exists and was not written by harness-run; choose an empty --out directory"
                )
            shutil.rmtree(context)
        for path in sorted(self.files):
            target = context / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(self.files[path])
            target.chmod(self.mode(path))
        (out / "manifests.yaml").write_text(self.manifests_yaml(), encoding="utf-8")
        (out / "digest").write_text(self.digest + "\n", encoding="utf-8")
        return out
