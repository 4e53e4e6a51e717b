"""schemathesis against the served ``/openapi.json`` (a bounded number of cases per operation): no
5xx, every answer conforms to the document (status code, content type, schema).

The routes that start processes (turns, prompts, exec) or stream forever (events) are left out:
those are driven by real CLI turns in test_api.py and test_conformance.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import schemathesis
from aiohttp import web
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi import checks as openapi_checks

from harness_run import AgentSpec
from harness_run.server._limits import AUTH_FAILURES, AuthFailures

from ._helpers import MODEL, ServerThread

_CASES = 5
_ALL_CHECKS = [  # slow answers and big bodies are expected
    HealthCheck.too_slow,
    HealthCheck.data_too_large,
    HealthCheck.large_base_example,
    HealthCheck.filter_too_much,
]
_LEFT_OUT = r".*/(turns|prompt|exec|events)$"
# a config that fits the document's JSON types may still break a spec rule (422 naming it): the
# "schema-valid data is accepted" check does not apply to those bodies
_SPEC_RULES: list[Any] = [cast(Any, openapi_checks).positive_data_acceptance]


def _no_cool_down(app: web.Application) -> None:
    """schemathesis's ignored-auth check sends many key-less requests from one address: the
    cool-down after repeated 401s (a 429, tested in test_load.py) would answer them instead."""
    app[AUTH_FAILURES] = AuthFailures(limit=1_000_000)


def test_no_5xx_and_answers_match_the_document(tmp_path: Path) -> None:
    spec = AgentSpec(name="fuzz", harness="claude-code", model=MODEL)
    with ServerThread(tmp_path, [spec], tune=_no_cool_down) as server:
        api: Any = schemathesis.openapi.from_url(f"{server.url}/openapi.json")
        api.config.update(base_url=server.url)
        auth = {"Authorization": f"Bearer {server.key}"}
        operations: list[Any] = [
            found.ok() for found in api.exclude(path_regex=_LEFT_OUT).get_all_operations()
        ]
        assert len(operations) >= 12

        for operation in operations:
            strategy: Any = operation.as_strategy()

            @given(case=strategy)
            @settings(max_examples=_CASES, deadline=None, suppress_health_check=_ALL_CHECKS, database=None)
            def check(case: Any) -> None:
                response = case.call(headers=auth)
                assert response.status_code < 500, f"{case.method} {case.formatted_path}: {response.text}"
                case.validate_response(response, excluded_checks=_SPEC_RULES)

            check()
