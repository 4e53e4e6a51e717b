"""Every error class round-trips through pickle and copy with its message and attributes (errors cross
process boundaries: worker processes, multiprocessing pools, test runners)."""

from __future__ import annotations

import copy
import inspect
import pickle
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

from harness_run import errors
from harness_run.errors import SpecError, SpecIssue

# A sample value for every constructor parameter an error class may take.
_SAMPLES: dict[str, Any] = {
    "message": "something failed; do this instead",
    "issues": [SpecIssue("mcp_servers[0].url", "not an http(s) URL", "give the full https:// URL")],
    "source": "agent.yaml",
    "exit_code": 3,
    "stderr_tail": "line 1\nline 2",
    "retryable": True,
    "status": 503,
    "code": "unavailable",
    "field": "config.model",
    "allow": "serve --policy allow.model",
}


def _error_classes() -> list[type[BaseException]]:
    return sorted(
        (
            obj
            for obj in vars(errors).values()
            if isinstance(obj, type) and issubclass(obj, BaseException) and obj.__module__ == errors.__name__
        ),
        key=lambda cls: cls.__name__,
    )


def _instance(cls: type[BaseException]) -> BaseException:
    """An instance with every parameter of its ``__init__`` given (a new parameter fails the test
    until it gets a sample above)."""
    if cls.__init__ is BaseException.__init__:
        return cls(_SAMPLES["message"])
    args: list[Any] = []
    kwargs: dict[str, Any] = {}
    for name, param in list(inspect.signature(cls.__init__).parameters.items())[1:]:
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        assert name in _SAMPLES, f"{cls.__name__}.__init__ takes {name!r}: add a sample value to _SAMPLES"
        if param.kind is param.KEYWORD_ONLY:
            kwargs[name] = _SAMPLES[name]
        else:
            args.append(_SAMPLES[name])
    return cls(*args, **kwargs)


def _state(error: BaseException) -> tuple[Any, ...]:
    return type(error), str(error), error.args, vars(error)


def test_the_module_has_the_expected_error_classes() -> None:
    names = {cls.__name__ for cls in _error_classes()}
    assert {"HarnessRunError", "SpecError", "UsageError", "RunError", "InfrastructureError"} <= names
    assert all(name in errors.__all__ for name in names)


_COPIES: dict[str, Callable[[BaseException], BaseException]] = {
    "pickle": lambda e: pickle.loads(pickle.dumps(e)),
    "pickle-protocol-0": lambda e: pickle.loads(pickle.dumps(e, protocol=0)),
    "copy": copy.copy,
    "deepcopy": copy.deepcopy,
}


@pytest.mark.parametrize("how", list(_COPIES))
@pytest.mark.parametrize("cls", _error_classes(), ids=lambda cls: cls.__name__)
def test_error_round_trips(cls: type[BaseException], how: str) -> None:
    error = _instance(cls)
    again = _COPIES[how](error)
    assert again is not error
    assert _state(again) == _state(error)
    assert getattr(again, "retryable", None) == getattr(error, "retryable", None)


def test_spec_error_keeps_its_issues_and_source() -> None:
    issues = [SpecIssue("model", "the model id is blank", "give the model's id"), SpecIssue("name", "bad")]
    error = SpecError(issues, source="agent.yaml")
    again = pickle.loads(pickle.dumps(error))
    assert again.issues == issues
    assert all(isinstance(issue, SpecIssue) for issue in again.issues)
    assert again.paths == ["model", "name"]
    assert again.source == "agent.yaml"
    assert str(again) == str(error)


def test_spec_issue_pickles_and_compares() -> None:
    issue = SpecIssue("", "message", "fix")
    assert issue.path == "<spec>"
    assert pickle.loads(pickle.dumps(issue)) == issue
    assert copy.copy(issue) == issue
    assert issue != SpecIssue("<spec>", "message", "other fix")
    assert len({issue, SpecIssue("<spec>", "message", "fix")}) == 1


def test_the_issue_check_in_a_fresh_interpreter() -> None:
    """The issue's reproduction, as a user would run it."""
    code = (
        "import pickle; from harness_run.errors import SpecError, SpecIssue; "
        "e = SpecError([SpecIssue('name', 'bad name', 'use e.g. my-agent')], source='a.yaml'); "
        "f = pickle.loads(pickle.dumps(e)); "
        "assert str(f) == str(e) and f.issues == e.issues and len(f.issues) == 1, f.issues; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"
