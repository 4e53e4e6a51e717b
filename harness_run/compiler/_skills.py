"""Staging skills into the build context: the only I/O the compiler does besides reading its own files.

Git skills are cloned (gitpython, imported only here) into a temporary directory, ``ref`` (a branch,
tag or commit; the default branch when ``None``) is resolved to a commit, and the files of that
commit's tree (the ``subdir``, or the whole repository) are read straight from git objects: no
checkout, no ``.git``, modes taken from git. Local skills are read from disk, relative paths
against ``base_dir``. Each skill lands under ``skills/<staged name>/``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness_run.errors import BuildError, SpecError, SpecIssue
from harness_run.spec import GitSkill, LocalSkill

__all__ = ["PinnedSkill", "StagedFile", "stage_skills"]

_SKIP_DIRS = frozenset({".git", "__pycache__", ".hg", ".svn"})
_SYMLINK_MODE = 0o120000


@dataclass(frozen=True, slots=True)
class PinnedSkill:
    """A git skill as built: where it came from and the commit its files were read at."""

    name: str
    url: str
    ref: str | None
    commit: str
    subdir: str | None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "url": self.url,
            "ref": self.ref,
            "commit": self.commit,
            "subdir": self.subdir,
        }


@dataclass(frozen=True, slots=True)
class StagedFile:
    data: bytes
    executable: bool


def stage_skills(
    skills: Iterable[GitSkill | LocalSkill], base_dir: Path
) -> tuple[dict[str, StagedFile], tuple[PinnedSkill, ...]]:
    """Context files (``skills/<name>/<path>``) and the pins of the git skills."""
    files: dict[str, StagedFile] = {}
    pins: list[PinnedSkill] = []
    for index, skill in enumerate(skills):
        prefix = f"skills/{skill.staged_name}/"
        if isinstance(skill, GitSkill):
            pin, entries = _read_git(skill)
            pins.append(pin)
        else:
            entries = dict(_read_local(skill, base_dir, index))
        if not entries:
            raise BuildError(
                f"skill {skill.staged_name!r} has no files; point it at a directory with a SKILL.md"
            )
        files.update({prefix + rel: staged for rel, staged in entries.items()})
    return files, tuple(pins)


# --- local --------------------------------------------------------------------------------------


def _read_local(skill: LocalSkill, base_dir: Path, index: int) -> Iterator[tuple[str, StagedFile]]:
    root = Path(skill.path).expanduser()
    if not root.is_absolute():
        root = base_dir / root
    if not root.exists():
        raise SpecError(
            [
                SpecIssue(
                    f"skills[{index}].path",
                    f"local skill directory {str(root)!r} does not exist",
                    "give a path relative to the spec file's directory, or an absolute one",
                )
            ]
        )
    if root.is_file():
        yield root.name, _read_file(root)
        return
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for filename in sorted(filenames):
            path = Path(dirpath, filename)
            yield path.relative_to(root).as_posix(), _read_file(path)


def _read_file(path: Path) -> StagedFile:
    try:
        return StagedFile(path.read_bytes(), bool(path.stat().st_mode & 0o111))
    except OSError as exc:
        raise BuildError(f"cannot read skill file {path}: {exc}") from None


# --- git ----------------------------------------------------------------------------------------


def _read_git(skill: GitSkill) -> tuple[PinnedSkill, dict[str, StagedFile]]:
    import git  # gitpython: only when a git skill is staged

    with tempfile.TemporaryDirectory(prefix="harness-run-skill-") as tmp:
        try:
            repo = git.Repo.clone_from(skill.url, tmp, no_checkout=True)
        except git.GitCommandError as exc:
            tail = "\n".join(str(exc.stderr).strip().splitlines()[-5:])
            raise BuildError(
                f"cannot clone skill repository {skill.url}: {tail}\n"
                "check the URL and that the repository is public"
            ) from None
        try:
            commit = _resolve(repo, skill.ref)
            files = dict(_tree_files(commit.tree, skill))
        finally:
            repo.close()
    pin = PinnedSkill(skill.staged_name, skill.url, skill.ref, commit.hexsha, skill.subdir)
    return pin, files


def _resolve(repo: Any, ref: str | None) -> Any:
    if ref is None:
        return repo.head.commit
    for candidate in (f"origin/{ref}", ref):
        try:
            return repo.commit(candidate)
        except Exception:  # gitdb BadName / ValueError: try the next spelling
            continue
    raise BuildError(
        f"ref {ref!r} is not a branch, tag or commit of the skill repository; "
        "check the spelling or leave ref unset for the default branch"
    )


def _tree_files(tree: Any, skill: GitSkill) -> Iterator[tuple[str, StagedFile]]:
    if skill.subdir:
        try:
            tree = tree / skill.subdir.strip("/")
        except KeyError:
            raise BuildError(f"subdir {skill.subdir!r} does not exist in {skill.url}") from None
        if tree.type != "tree":
            raise BuildError(f"subdir {skill.subdir!r} of {skill.url} is not a directory")
    root = tree.path
    for item in sorted(tree.traverse(), key=lambda i: i.path):
        if item.type != "blob":
            continue  # trees are walked; submodules ("commit") are not staged
        rel = item.path[len(root) :].lstrip("/") if root else item.path
        if item.mode == _SYMLINK_MODE:
            raise BuildError(
                f"skill {skill.staged_name!r} contains a symlink ({rel}); replace it with a copy of the file"
            )
        yield rel, StagedFile(item.data_stream.read(), bool(item.mode & 0o111))
