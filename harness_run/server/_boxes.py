"""``POST /v1/boxes``: a HarnessBox client's configuration -> the served engine that runs it.

``HarnessBox(base_url=..., api_key=...)`` sends the :class:`~harness_run.AgentSpec` its settings make
(harness, model, prompt, repo, policy, network…). The server answers with the engine it serves whose
spec is the same apart from its name — the client then uses it as :func:`harness_run.connect` does.
Keys need the ``turn`` scope. A configuration no served engine runs is refused (404, naming the
engines there are), as is a spec that does not validate (422); deploying a new engine from a
client's configuration is not offered: the operator serves the engines (``harness-run serve
--spec``, ``local.deploy``/``sandbox.deploy`` into the store) and keys only pick among them.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web
from pydantic import BaseModel, ConfigDict

from harness_run.errors import SessionNotFoundError
from harness_run.server._access import require
from harness_run.server._state import ServerState
from harness_run.spec import AgentSpec
from harness_run.web import read_body

__all__ = ["BoxRequest", "BoxResponse", "add_box_routes", "matching_engine"]


class BoxRequest(BaseModel):
    """The body of ``POST /v1/boxes``: the client's spec (``AgentSpec.to_dict()``)."""

    model_config = ConfigDict(extra="forbid")
    spec: AgentSpec


class BoxResponse(BaseModel):
    """The served engine that runs the client's configuration."""

    engine: str
    version: str


def _without_name(spec: AgentSpec) -> dict[str, Any]:
    data = spec.to_dict()
    data.pop("name", None)
    return data


def matching_engine(state: ServerState, spec: AgentSpec) -> str | None:
    """The name of a served engine whose spec is ``spec`` but for the name (its own name first)."""
    wanted = _without_name(spec)
    for name in sorted(state.engines, key=lambda n: n != spec.name):
        served: object = getattr(state.engines[name], "spec", None)
        if isinstance(served, AgentSpec) and _without_name(served) == wanted:
            return name
    return None


def add_box_routes(app: web.Application, state: ServerState) -> None:
    """Add ``POST /v1/boxes`` to ``app`` (the server of ``state``)."""

    async def boxes(request: web.Request) -> web.Response:
        require(request, "turn")
        body = await read_body(request, BoxRequest)
        name = await asyncio.to_thread(matching_engine, state, body.spec)
        if name is None:
            served = ", ".join(sorted(state.engines)) or "none"
            raise SessionNotFoundError(
                f"no engine here runs this HarnessBox configuration (harness {body.spec.harness!r}, "
                f"model {body.spec.model!r}); the server serves: {served}. Ask the operator to serve "
                "it (`harness-run serve --spec FILE` with this configuration's spec, "
                "HarnessBox(...).spec.to_yaml())"
            )
        engine = state.engines[name]
        answer = BoxResponse(engine=name, version=engine.version)
        return web.Response(text=answer.model_dump_json(), content_type="application/json")

    app.router.add_route("POST", "/v1/boxes", boxes)
