"""The OpenAPI 3.1 document of the server, generated from the wire models' JSON Schemas (pydantic),
so it cannot drift from what the handlers validate."""

from __future__ import annotations

import functools
from typing import Any

from pydantic import BaseModel
from pydantic.json_schema import models_json_schema

from harness_run.events import (
    ApprovalDecisionEvent,
    ApprovalRequestEvent,
    QuestionAnswerEvent,
    QuestionEvent,
)
from harness_run.runtime.server_client import (
    ApprovalList,
    CreateSession,
    Decision,
    EngineList,
    ErrorBody,
    ExecOutput,
    ExecRequest,
    Health,
    Interrupted,
    KeyInfo,
    SessionList,
    Steered,
    SteerRequest,
    TurnList,
    TurnRequest,
    TurnStarted,
    WorkspaceRequest,
)
from harness_run.store import ApprovalRecord, EngineRecord, SessionRecord
from harness_run.vocab.version import __version__

__all__ = ["openapi_document"]

_SSE = "sse"
_NONE = "none"

# (method, path, summary, request model, response model or _SSE/_NONE, success status)
_OPERATIONS: list[tuple[str, str, str, type[BaseModel] | None, type[BaseModel] | str, int]] = [
    ("get", "/healthz", "Liveness (no key needed)", None, Health, 200),
    ("get", "/v1/engines", "The engines this server serves", None, EngineList, 200),
    ("get", "/v1/engines/{name}", "One engine's current version", None, EngineRecord, 200),
    ("get", "/v1/engines/{name}/versions", "An engine's versions, oldest first", None, EngineList, 200),
    ("get", "/v1/keys/me", "The caller's key: scopes, budget and spend", None, KeyInfo, 200),
    ("post", "/v1/engines/{name}/sessions", "Start a session", CreateSession, SessionRecord, 201),
    ("get", "/v1/sessions", "List sessions (?engine=)", None, SessionList, 200),
    ("get", "/v1/sessions/{session_id}", "A session's record, live status", None, SessionRecord, 200),
    ("delete", "/v1/sessions/{session_id}", "Delete a session and its history", None, _NONE, 204),
    ("get", "/v1/sessions/{session_id}/history", "The session's finished turns", None, TurnList, 200),
    (
        "post",
        "/v1/sessions/{session_id}/turns",
        "Start the next turn (SSE with Accept)",
        TurnRequest,
        TurnStarted,
        200,
    ),
    ("get", "/v1/sessions/{session_id}/events", "The session's events, replayed then live", None, _SSE, 200),
    (
        "post",
        "/v1/sessions/{session_id}/steer",
        "Add a message to the running turn",
        SteerRequest,
        Steered,
        200,
    ),
    ("post", "/v1/sessions/{session_id}/interrupt", "Stop the running turn", None, Interrupted, 200),
    (
        "post",
        "/v1/sessions/{session_id}/exec",
        "Run a command in the workspace",
        ExecRequest,
        ExecOutput,
        200,
    ),
    (
        "get",
        "/v1/sessions/{session_id}/approvals",
        "Tool calls and questions waiting for a person, and decided ones (?pending=1, ?turn=N|all)",
        None,
        ApprovalList,
        200,
    ),
    (
        "get",
        "/v1/sessions/{session_id}/approvals/{request_id}",
        "One approval request or question",
        None,
        ApprovalRecord,
        200,
    ),
    (
        "post",
        "/v1/sessions/{session_id}/approvals/{request_id}",
        "Allow or deny a waiting tool call, or answer a question (the first decision wins)",
        Decision,
        ApprovalRecord,
        200,
    ),
    ("post", "/v1/workspaces", "HarnessBox: start a session", WorkspaceRequest, SessionRecord, 201),
    ("get", "/v1/workspaces", "HarnessBox: list sessions", None, SessionList, 200),
    ("delete", "/v1/workspaces/{session_id}", "HarnessBox: delete a session", None, _NONE, 204),
    ("post", "/v1/workspaces/{session_id}/prompt", "HarnessBox: a turn, as SSE", TurnRequest, _SSE, 200),
    ("get", "/v1/workspaces/{session_id}/events", "HarnessBox: the event stream", None, _SSE, 200),
]

_STREAMED: tuple[type[BaseModel], ...] = (
    ApprovalRequestEvent,
    ApprovalDecisionEvent,
    QuestionEvent,
    QuestionAnswerEvent,
)
"""Events of the SSE streams a client acts on (each ``data:`` is one AgentEvent, ``event:`` its type):
documented as schemas, named by the streams' ``x-event-types``."""

_MODELS: tuple[type[BaseModel], ...] = (
    ErrorBody,
    *_STREAMED,
    *{m for _, _, _, req, res, _ in _OPERATIONS for m in (req, res) if isinstance(m, type)},
)


@functools.cache
def openapi_document() -> dict[str, Any]:
    """The document served at ``GET /openapi.json``."""
    _, schemas = models_json_schema(
        [(m, "validation") for m in sorted(_MODELS, key=lambda m: m.__name__)],
        ref_template="#/components/schemas/{model}",
    )
    paths: dict[str, dict[str, Any]] = {}
    for method, path, summary, request, response, status in _OPERATIONS:
        paths.setdefault(path, {})[method] = _operation(method, path, summary, request, response, status)
    return {
        "openapi": "3.1.0",
        "info": {"title": "harness-run server", "version": __version__},
        "paths": paths,
        "components": {
            "schemas": schemas.get("$defs", {}),
            "securitySchemes": {"apiKey": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"apiKey": []}],
    }


def _ref(model: type[BaseModel]) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{model.__name__}"}


def _operation(
    method: str,
    path: str,
    summary: str,
    request: type[BaseModel] | None,
    response: type[BaseModel] | str,
    status: int,
) -> dict[str, Any]:
    op: dict[str, Any] = {"summary": summary, "operationId": f"{method}_{path.strip('/').replace('/', '_')}"}
    params = [p.strip("{}") for p in path.split("/") if p.startswith("{")]
    op["parameters"] = [
        {"name": p, "in": "path", "required": True, "schema": {"type": "string"}} for p in params
    ]
    if path.endswith("/events"):
        op["parameters"] += [
            {"name": "after", "in": "query", "required": False, "schema": {"type": "string"}},
            {"name": "Last-Event-ID", "in": "header", "required": False, "schema": {"type": "string"}},
        ]
    if request is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(request)}}}
    if path.endswith("/approvals"):
        op["parameters"] += [
            {"name": "pending", "in": "query", "required": False, "schema": {"enum": ["1", "0", "true"]}},
            {"name": "turn", "in": "query", "required": False, "schema": {"type": "string"}},
        ]
    if response == _SSE:
        ok: dict[str, Any] = {
            "description": "server-sent events: `event: <type>`, `id: <turn>:<seq>`, `data: <AgentEvent "
            "JSON>`; a tool call waiting for a person is an `approval_request` (decide it with POST "
            "/v1/sessions/{session_id}/approvals/{request_id}), then an `approval_decision`; a question "
            "is a `question`, then a `question_answer`",
            "content": {
                "text/event-stream": {
                    "schema": {"type": "string"},
                    "x-event-types": {m.model_fields["type"].default: _ref(m) for m in _STREAMED},
                }
            },
        }
    elif isinstance(response, str):
        ok = {"description": "done"}
    else:
        ok = {"description": "OK", "content": {"application/json": {"schema": _ref(response)}}}
    errors = {"content": {"application/json": {"schema": _ref(ErrorBody)}}}
    op["responses"] = {
        str(status): ok,
        "400": {"description": "a request that cannot be carried out as asked", **errors},
        "401": {"description": "no, a wrong or a revoked API key", **errors},
        "403": {
            "description": "the key's scope, budget or the operator's policy does not allow it "
            "(``allow`` names what would)",
            **errors,
        },
        "404": {
            "description": "unknown engine, or no session of this key's (another key's is a 404)",
            **errors,
        },
        "409": {
            "description": "the session is running a turn (approvals: the request was decided "
            "already, or expired)",
            **errors,
        },
        "422": {"description": "the body does not validate (field named)", **errors},
        "429": {
            "description": "too many open streams for this key or session, or too many failed "
            "key checks from this address",
            **errors,
        },
    }
    if request is not None:
        op["responses"]["413"] = {"description": "the body is over 16 MiB", **errors}
    if path == "/healthz":
        op["security"] = []
        op["responses"] = {"200": ok}
    return op
