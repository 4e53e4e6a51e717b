"""Checks for where skills and repositories come from: git URLs and refs, and local paths.

A spec *document* (YAML/JSON text or file, see :func:`~harness_run.spec._base.from_document`) may
only name network git URLs and paths inside its own directory. A spec built in Python may also
use local sources — ``file://`` / absolute-path git repositories and absolute skill directories —
which is how tests and local development point at repositories on disk.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath
from typing import Final
from urllib.parse import urlsplit

from harness_run.spec._base import in_document, spec_fail

__all__ = ["check_git_ref", "check_git_url", "check_relative_path", "check_skill_path"]

_NETWORK_SCHEMES: Final = frozenset({"https", "http", "ssh", "git"})
# scp-like syntax with a user, as git accepts it: git@github.com:acme/repo.git
_SCP_LIKE: Final = re.compile(r"^[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^:]*$")
_REMOTE_HELPER: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9+.-]*::")
_DRIVE: Final = re.compile(r"^[A-Za-z]:")
_REF_CHARS: Final = re.compile(r"^[A-Za-z0-9._/+@-]+$")
_GIT_URL_FIX: Final = (
    "use an https:// (or http://, ssh://, git://) URL or the git@host:owner/repo form; local "
    "repositories (file:// or an absolute path) can only be given from Python code"
)
_LOCAL_FIX: Final = (
    "a spec file may only use network URLs; build the spec in Python for a local repository "
    "(RepoSource.git('file:///path/to/repo'))"
)


def _local_source(what: str, value: str) -> None:
    if in_document():
        raise spec_fail(f"{what} {value!r} is a local path, which a spec file may not name", _LOCAL_FIX)


def check_git_url(url: str) -> str:
    """A URL ``git clone`` may be given: network schemes; ``file://`` and absolute paths from code.

    Refused everywhere: remote helpers (``ext::cmd``, ``fd::``), other schemes, a leading ``-``
    (read as an option), whitespace and control characters.
    """
    if not url.strip() or not url.isprintable() or any(c.isspace() for c in url) or url.startswith("-"):
        raise spec_fail(
            f"{url!r} is not a git URL (blank, whitespace, control characters or '-')", _GIT_URL_FIX
        )
    if _REMOTE_HELPER.match(url):
        raise spec_fail(
            f"{url!r} uses a git remote helper (transport::address), which runs programs", _GIT_URL_FIX
        )
    if {".", ".."} & set(re.split(r"[/:\\]", url)):
        raise spec_fail(f"{url!r} has a '.' or '..' path segment", "give the repository's own URL")
    if url.startswith("/"):
        _local_source("git URL", url)
        return url
    if _SCP_LIKE.match(url):
        return url
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "file":
        if parts.netloc not in {"", "localhost"}:
            raise spec_fail(f"{url!r} names a remote host in a file:// URL", "use file:///absolute/path")
        _local_source("git URL", url)
        return url
    if scheme not in _NETWORK_SCHEMES:
        shown = f"scheme {scheme + '://'!r}" if scheme else "no scheme"
        raise spec_fail(f"{url!r} has {shown}, which is not a git network URL", _GIT_URL_FIX)
    try:
        host = parts.hostname
    except ValueError:  # e.g. 'https://[::1' (an unclosed IPv6 bracket)
        host = None
    if not host:
        raise spec_fail(f"{url!r} names no host", _GIT_URL_FIX)
    return url


def check_git_ref(ref: str) -> str:
    """A branch, tag or commit: one word that git accepts as a ref and no option or shell syntax."""
    fix = "use a branch, tag or commit, e.g. 'main', 'v1.2.0' or a commit sha"
    if (
        not _REF_CHARS.match(ref)
        or ref.startswith(("-", ".", "/"))
        or ref.endswith(("/", ".", ".lock"))
        or ".." in ref
        or "//" in ref
        or "@{" in ref
    ):
        raise spec_fail(f"{ref!r} is not a git branch, tag or commit", fix)
    return ref


def _parts(path: str, what: str) -> tuple[str, ...]:
    if not path.strip() or "\x00" in path:
        raise spec_fail(f"{what} {path!r} is blank or contains NUL", "give a directory path")
    if path != path.strip():
        raise spec_fail(f"{what} {path!r} starts or ends with whitespace", "remove the surrounding spaces")
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if ".." in parts:
        raise spec_fail(f"{what} {path!r} leaves its directory", "remove '..': the path must stay inside")
    return parts


def _is_absolute(path: str) -> bool:
    return path.startswith(("/", "\\", "~")) or bool(_DRIVE.match(path))


def check_relative_path(path: str, what: str, whole: str) -> str:
    """A directory inside something (a repository, the workspace): relative, no ``..``, not ``.``.

    ``whole`` is the fix for ``.`` (e.g. "leave subdir out for the whole repository").
    """
    parts = _parts(path, what)
    if _is_absolute(path):
        raise spec_fail(f"{what} {path!r} must be a relative path", "drop the leading '/' (or '~', drive)")
    if not [p for p in parts if p != "."]:
        raise spec_fail(f"{what} {path!r} names no directory", whole)
    return path


def check_skill_path(path: str) -> str:
    """A local skill directory: in a spec file, relative to its directory and inside it; from code,
    relative (to the compile ``base_dir``) or absolute — never the filesystem root or home."""
    parts = _parts(path, "skill path")
    absolute = _is_absolute(path)
    if absolute and in_document():
        raise spec_fail(
            f"skill path {path!r} is absolute; a spec file's skills are relative to its directory",
            "give the path relative to the spec file, e.g. skills/my-skill (or build the spec in Python)",
        )
    if absolute and not [p for p in parts if p.strip("/") not in {"", ".", "~"} and not _DRIVE.match(p)]:
        raise spec_fail(
            f"skill path {path!r} names the filesystem root or the home directory",
            "point it at the skill's own directory (the one with SKILL.md)",
        )
    return path
