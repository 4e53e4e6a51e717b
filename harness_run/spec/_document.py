"""A spec as a spec *file* holds it (``AgentSpec.to_yaml``): what ``from_yaml`` and
``harness-run validate`` read back as the same spec.

A spec file names local skill directories relative to its own directory, and nothing outside it
(:func:`~harness_run.spec._base.from_document`). A spec built in Python may name absolute ones: they
are rewritten relative to the file being written, or refused, naming the field and the fix, when
there is no file (text only) or the directory is outside the file's. What no spec file may hold at
all (a local repository, ``file://`` skills) is refused the same way, before anything is written.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import Any

from harness_run.errors import SpecError, SpecIssue
from harness_run.spec._base import SpecModel, from_document
from harness_run.spec._values import GitSkill, LocalSkill

__all__ = ["document_data"]

_TEXT_FIX = (
    "pass the file to write, spec.to_yaml('agent.yaml'): local skill paths are then written relative "
    "to it; or give the skill path relative (to the spec file's directory)"
)


def document_data(
    spec: SpecModel, skills: Sequence[GitSkill | LocalSkill], path: Path | None
) -> dict[str, Any]:
    """The non-default fields of ``spec`` (an ``AgentSpec``, whose ``skills`` these are) as the file
    at ``path`` (None: text with no file) holds them.

    Raises :class:`SpecError` naming each field a spec file cannot hold there, with the fix.
    """
    data = spec.to_dict(exclude_defaults=True)
    source = f"{path} (not written)" if path is not None else "to_yaml() text"
    directory = Path(os.path.abspath(path.parent)) if path is not None else None
    issues: list[SpecIssue] = []
    for index, skill in enumerate(skills):
        if not isinstance(skill, LocalSkill) or not _is_absolute(skill.path):
            continue
        where = f"skills[{index}].path"
        if directory is None:
            issues.append(
                SpecIssue(
                    where,
                    f"{skill.path!r} is absolute; a spec file names skills relative to itself",
                    _TEXT_FIX,
                )
            )
            continue
        relative = _inside(Path(skill.path).expanduser(), directory)
        if relative is None:
            issues.append(
                SpecIssue(
                    where,
                    f"{skill.path!r} is outside {directory}, and a spec file may only name directories "
                    "inside its own",
                    "write the spec file into a directory that holds the skill, or copy the skill "
                    f"under {directory}",
                )
            )
            continue
        entry: dict[str, Any] = data["skills"][index]
        entry["path"] = relative
        if relative == "." and skill.name is None:  # keep the staged name the absolute path gave
            entry["name"] = skill.staged_name
    if issues:
        raise SpecError(issues, source=source)
    with from_document():  # what from_yaml would refuse (local repositories, file:// skills …)
        spec.from_dict(data, source=source)
    return data


def _is_absolute(path: str) -> bool:
    return path.startswith(("/", "~")) or Path(path).is_absolute()


def _inside(target: Path, directory: Path) -> str | None:
    """``target`` relative to ``directory`` (POSIX form) if it is inside it, else None: first as
    written, then with symlinks resolved on both sides."""
    pairs = ((Path(os.path.abspath(target)), directory), (target.resolve(), directory.resolve()))
    for candidate, root in pairs:
        if candidate.is_relative_to(root):
            return PurePosixPath(*candidate.relative_to(root).parts).as_posix()
    return None
