"""The request handler of the emulated API server: kmock's ``KubernetesEmulator`` made stricter.

kmock serves the HTTP side (aiohttp), parses Kubernetes URLs, answers discovery and renders
``Status`` errors, and keeps every object's history in ``.objects``. This subclass takes over the
resource verbs to behave like a real API server for what harness-run needs:

- create (409 AlreadyExists, ``generateName``), get, list, watch, merge/JSON/apply patch, replace
  (PUT, ``resourceVersion`` preconditions -> 409 Conflict), delete (finalizers, ownerReference
  garbage collection), deletecollection, the ``status`` subresource (the main endpoint ignores
  ``status``; ``/status`` changes only ``status``);
- ``metadata.uid/resourceVersion/generation/creationTimestamp``; no-op updates change nothing;
- pruning of unknown fields (or 400 with ``fieldValidation=Strict``), schema defaults, validation
  against the CRD schema -> 422 ``Invalid`` naming the field;
- ``labelSelector``/``fieldSelector`` on list, watch and deletecollection; watches resume from a
  ``resourceVersion`` (410 Gone when too old) and honour ``timeoutSeconds``; an object that stops
  (starts) matching a watch's selector is sent as DELETED (ADDED), as the real server does.

Each served version keeps its own objects (no conversion webhook runs here).
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import secrets
import time
import uuid
from typing import Any, cast

import aiohttp.web
import attrs
import jsonpatch  # type: ignore[import-untyped]
import kmock

from testkit.cluster._discovery import discovery
from testkit.cluster._objects import Obj, WatchEvent, api_error, merge_patch, now, spec_part
from testkit.cluster._schema import Cause, ResourceDef, validate_metadata
from testkit.cluster._selectors import SelectorError, parse_field_selector, parse_label_selector

__all__ = ["ApiServer"]

_LOG_LIMIT = 5_000  # watch history kept for resuming (older resourceVersions get 410 Gone)
_MERGE_TYPES = ("application/merge-patch+json", "application/strategic-merge-patch+json")


@attrs.define(kw_only=True)
class ApiServer(kmock.KubernetesEmulator):
    """kmock's emulator with real API-server semantics for the registered resources."""

    field_validation: str = "Strict"
    _defs: dict[tuple[str, str, str], ResourceDef] = attrs.field(factory=dict, init=False)
    _rv: int = attrs.field(default=1, init=False)
    _log: list[WatchEvent] = attrs.field(factory=list, init=False)
    _log_first: int = attrs.field(default=2, init=False)  # rv of _log[0]
    _changed: asyncio.Condition | None = attrs.field(default=None, init=False)
    _stopping: bool = attrs.field(default=False, init=False)
    warnings: list[str] = attrs.field(factory=list, init=False)

    # ---------------------------------------------------------------------------------------
    # registration
    # ---------------------------------------------------------------------------------------

    def register(self, rdef: ResourceDef) -> None:
        self._defs[(rdef.group, rdef.version, rdef.plural)] = rdef
        verbs = {"create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"}
        self.resources[kmock.resource(rdef.group, rdef.version, rdef.plural)] = kmock.ResourceInfo(
            kind=rdef.kind,
            namespaced=rdef.namespaced,
            singular=rdef.kind.lower(),
            verbs=verbs,
            shortnames=set(rdef.short_names),
            subresources={"status"} if rdef.status_subresource else set(),
        )

    async def shutdown(self) -> None:
        """End every open watch (their clients see the stream close)."""
        self._stopping = True
        await self._notify()

    # ---------------------------------------------------------------------------------------
    # dispatch
    # ---------------------------------------------------------------------------------------

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        res = request.resource
        if res is None or res.plural is None:
            path = request.url.path.rstrip("/")
            found = discovery(self._defs.values(), path) if request.method == kmock.method.GET else None
            if found is not None:
                return aiohttp.web.json_response(found)
            return await super()._handle(request)  # /version, unknown paths
        rdef = self._defs.get((res.group or "", res.version or "", res.plural))
        if rdef is None:
            raise api_error(
                404, "NotFound", f"the server could not find the requested resource ({request.url.path})"
            )
        if rdef.namespaced and request.namespace is None and request.name is not None:
            raise api_error(404, "NotFound", f"{rdef.qualified} is namespaced: use /namespaces/<ns>/...")
        sub = request.subresource
        if sub not in (None, "status") or (sub == "status" and not rdef.status_subresource):
            raise api_error(404, "NotFound", f"{rdef.qualified} has no subresource {sub!r}")
        method = str(request.method.value).upper()
        if method == "GET" and request.name is None:
            watch = str(request.params.get("watch", "")).lower() in ("true", "1")
            return await (self._watch(rdef, request) if watch else self._list(rdef, request))
        if method == "GET":
            return aiohttp.web.json_response(self._get(rdef, request.namespace, request.name or ""))
        if method == "POST" and request.name is None:
            return await self._create(rdef, request)
        if method in ("PATCH", "PUT") and request.name is not None:
            return await self._update(rdef, request, patch=method == "PATCH")
        if method == "DELETE" and request.name is not None:
            return await self._delete(rdef, request.namespace, request.name)
        if method == "DELETE":
            return await self._delete_collection(rdef, request)
        raise api_error(405, "MethodNotAllowed", f"{method} is not supported on {request.url.path}")

    # ---------------------------------------------------------------------------------------
    # storage
    # ---------------------------------------------------------------------------------------

    @staticmethod
    def _key(rdef: ResourceDef, namespace: str | None, name: str) -> tuple[kmock.resource, str | None, str]:
        return (kmock.resource(rdef.group, rdef.version, rdef.plural), namespace, name)

    def _stored(self, rdef: ResourceDef, namespace: str | None, name: str) -> Obj | None:
        key = self._key(rdef, namespace, name)
        if key not in self.objects or self.objects[key].deleted:
            return None
        return copy.deepcopy(self.objects[key].raw)

    def _all(self, rdef: ResourceDef, namespace: str | None) -> list[Obj]:
        res = kmock.resource(rdef.group, rdef.version, rdef.plural)
        out: list[Obj] = []
        for (resource, ns, _name), obj in self.objects.items():
            if resource == res and (namespace is None or ns == namespace) and not obj.deleted:
                out.append(obj.raw)
        out.sort(key=lambda o: (o["metadata"].get("namespace") or "", o["metadata"]["name"]))
        return copy.deepcopy(out)

    async def _notify(self) -> None:
        if self._changed is None:
            self._changed = asyncio.Condition()
        async with self._changed:
            self._changed.notify_all()

    async def _commit(self, rdef: ResourceDef, kind: str, old: Obj | None, new: Obj) -> Obj:
        meta = new["metadata"]
        self._rv += 1
        meta["resourceVersion"] = str(self._rv)
        key = self._key(rdef, meta.get("namespace"), meta["name"])
        if kind == "DELETED":
            self.objects[key].delete()
        elif key in self.objects:
            self.objects[key].history.append(copy.deepcopy(new))
        else:
            self.objects[key] = copy.deepcopy(new)
        self._log.append(
            WatchEvent(
                self._rv, kind, (rdef.group, rdef.version, rdef.plural), meta.get("namespace"), old, new
            )
        )
        if len(self._log) > _LOG_LIMIT:
            drop = len(self._log) - _LOG_LIMIT // 2
            del self._log[:drop]
            self._log_first += drop
        await self._notify()
        return new

    def _get(self, rdef: ResourceDef, namespace: str | None, name: str) -> Obj:
        obj = self._stored(rdef, namespace, name)
        if obj is None:
            raise api_error(
                404,
                "NotFound",
                f'{rdef.qualified} "{name}" not found',
                {"name": name, "group": rdef.group, "kind": rdef.plural},
            )
        return obj

    # ---------------------------------------------------------------------------------------
    # checks shared by create and update
    # ---------------------------------------------------------------------------------------

    def _admit(self, rdef: ResourceDef, obj: Obj, request: kmock.Request) -> dict[str, str]:
        """Prune, default and validate ``obj`` in place; returns extra response headers."""
        mode = str(request.params.get("fieldValidation") or self.field_validation)
        unknown = rdef.prune(obj)
        headers: dict[str, str] = {}
        if unknown and mode == "Strict":
            listed = ", ".join(f'unknown field "{u}"' for u in unknown)
            raise api_error(
                400,
                "BadRequest",
                f"strict decoding error: {listed}",
                {
                    "causes": [
                        {"reason": "FieldValueInvalid", "field": u, "message": "unknown field"}
                        for u in unknown
                    ]
                },
            )
        if unknown and mode != "Ignore":
            self.warnings.extend(unknown)
            headers["Warning"] = ", ".join(f'299 - "unknown field \\"{u}\\""' for u in unknown)
        rdef.apply_defaults(obj)
        causes = validate_metadata(obj, namespaced=rdef.namespaced) + rdef.validate(obj)
        if causes:
            raise self._invalid(rdef, obj, causes)
        return headers

    @staticmethod
    def _invalid(rdef: ResourceDef, obj: Obj, causes: list[Cause]) -> Exception:
        name = (obj.get("metadata") or {}).get("name") or ""
        listed = ", ".join(str(c) for c in causes)
        return api_error(
            422,
            "Invalid",
            f'{rdef.kind}.{rdef.group or "core"} "{name}" is invalid: {listed}',
            {
                "name": name,
                "group": rdef.group,
                "kind": rdef.kind,
                "causes": [{"reason": c.reason, "message": c.message, "field": c.field} for c in causes],
            },
        )

    @staticmethod
    def _body(request: kmock.Request) -> Any:
        ctype = str(request.headers.get("Content-Type", "application/json")).split(";")[0].strip()
        try:
            if ctype == "application/apply-patch+yaml":
                import yaml

                return yaml.safe_load(request.body or b"null")
            return json.loads(request.body or b"null")
        except ValueError as exc:
            raise api_error(400, "BadRequest", f"the request body is not valid JSON: {exc}") from None

    def _check_type(self, rdef: ResourceDef, obj: Obj) -> None:
        if obj.get("apiVersion") not in (None, rdef.api_version) or obj.get("kind") not in (None, rdef.kind):
            raise api_error(
                400,
                "BadRequest",
                f"the API version/kind in the data ({obj.get('apiVersion')}/{obj.get('kind')}) does not "
                f"match the expected {rdef.api_version}/{rdef.kind}",
            )
        obj["apiVersion"], obj["kind"] = rdef.api_version, rdef.kind

    # ---------------------------------------------------------------------------------------
    # verbs
    # ---------------------------------------------------------------------------------------

    async def _create(
        self, rdef: ResourceDef, request: kmock.Request, body: Any = None
    ) -> aiohttp.web.StreamResponse:
        obj = self._body(request) if body is None else body
        if not isinstance(obj, dict):
            raise api_error(400, "BadRequest", "the request body must be a JSON object")
        obj = cast(Obj, obj)
        self._check_type(rdef, obj)
        meta = obj.setdefault("metadata", {})
        if not isinstance(meta, dict):
            raise self._invalid(rdef, obj, [Cause("FieldValueTypeInvalid", "metadata", "Invalid value")])
        meta = cast(Obj, meta)
        if rdef.namespaced:
            if request.namespace is None:
                raise api_error(
                    400, "BadRequest", f"{rdef.qualified} is namespaced: POST to /namespaces/<ns>/..."
                )
            if meta.get("namespace") not in (None, "", request.namespace):
                raise api_error(
                    400,
                    "BadRequest",
                    "the namespace of the provided object does not match the namespace sent on the request",
                )
            meta["namespace"] = request.namespace
        if meta.get("resourceVersion"):
            raise api_error(400, "BadRequest", "resourceVersion should not be set on objects to be created")
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = f"{str(meta['generateName'])[:58]}{secrets.token_hex(3)[:5]}"
        if rdef.status_subresource:
            obj.pop("status", None)
        headers = self._admit(rdef, obj, request)
        if self._stored(rdef, meta.get("namespace"), meta["name"]) is not None:
            raise api_error(
                409,
                "AlreadyExists",
                f'{rdef.qualified} "{meta["name"]}" already exists',
                {"name": meta["name"], "group": rdef.group, "kind": rdef.plural},
            )
        for server_field in ("uid", "creationTimestamp", "generation", "deletionTimestamp"):
            meta.pop(server_field, None)
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=now(), generation=1)
        await self._commit(rdef, "ADDED", None, obj)
        if meta.get("ownerReferences"):
            await self._collect_garbage()  # created with owners that are already gone: collected at once
        return aiohttp.web.json_response(obj, status=201, headers=headers)

    def _patched(self, rdef: ResourceDef, request: kmock.Request, current: Obj, *, patch: bool) -> Obj:
        body = self._body(request)
        ctype = str(request.headers.get("Content-Type", "")).split(";")[0].strip()
        if not patch:
            if not isinstance(body, dict):
                raise api_error(400, "BadRequest", "the request body must be a JSON object")
            return cast(Obj, body)
        if ctype == "application/json-patch+json":
            if not isinstance(body, list):
                raise api_error(
                    400,
                    "BadRequest",
                    "json: cannot unmarshal object into Go value of type []handlers.jsonPatchOp (a JSON "
                    "patch must be a list of operations; to send a merge patch with the kubernetes client "
                    "pass _content_type='application/merge-patch+json')",
                )
            try:
                return cast(Obj, jsonpatch.apply_patch(current, body))  # type: ignore[no-untyped-call]
            except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as exc:  # type: ignore[misc]
                raise api_error(422, "Invalid", f"the JSON patch could not be applied: {exc}") from None
        if ctype == "application/strategic-merge-patch+json" and rdef.custom:
            raise api_error(
                415,
                "UnsupportedMediaType",
                "the body of the request was in an unknown format - accepted media types include: "
                "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml "
                "(strategic merge patch is not supported for custom resources)",
            )
        if ctype == "application/apply-patch+yaml" and not request.params.get("fieldManager"):
            raise api_error(422, "Invalid", "fieldManager: Required value: is required for apply patch")
        if ctype not in (*_MERGE_TYPES, "application/apply-patch+yaml"):
            raise api_error(415, "UnsupportedMediaType", f"the patch content type {ctype!r} is not supported")
        if not isinstance(body, dict):
            raise api_error(400, "BadRequest", "a merge patch must be a JSON object")
        return cast(Obj, merge_patch(current, body))

    def _applies_a_new_object(self, rdef: ResourceDef, request: kmock.Request) -> bool:
        ctype = str(request.headers.get("Content-Type", "")).split(";")[0].strip()
        name = request.name or ""
        if ctype != "application/apply-patch+yaml" or self._stored(rdef, request.namespace, name) is not None:
            return False
        if not request.params.get("fieldManager"):
            raise api_error(422, "Invalid", "fieldManager: Required value: is required for apply patch")
        body = self._body(request)
        if isinstance(body, dict) and (cast(Obj, body).get("metadata") or {}).get("name") not in (None, name):
            raise api_error(400, "BadRequest", "the name of the object does not match the name in the URL")
        return True

    @staticmethod
    def _carry_over(rdef: ResourceDef, request: kmock.Request, current: Obj, new: Obj) -> Obj:
        """What an update cannot change: server-set metadata; status (main) or all but status (/status)."""
        meta, old_meta = cast(Obj, new["metadata"]), cast(Obj, current["metadata"])
        for server_field in (
            "name",
            "namespace",
            "uid",
            "creationTimestamp",
            "generation",
            "deletionTimestamp",
        ):
            if server_field in old_meta:
                meta[server_field] = old_meta[server_field]
            else:
                meta.pop(server_field, None)
        meta["resourceVersion"] = old_meta["resourceVersion"]
        if not rdef.status_subresource:
            return new
        if request.subresource == "status":
            new = cast(Obj, {**current, "status": new.get("status")})
            if new["status"] is None:
                new.pop("status")
        elif "status" in current:
            new["status"] = current["status"]
        else:
            new.pop("status", None)
        return new

    async def _update(
        self, rdef: ResourceDef, request: kmock.Request, *, patch: bool
    ) -> aiohttp.web.StreamResponse:
        name = request.name or ""
        if patch and self._applies_a_new_object(rdef, request):
            return await self._create(rdef, request, self._body(request))  # server-side apply creates
        current = self._get(rdef, request.namespace, name)
        new = self._patched(rdef, request, current, patch=patch)
        self._check_type(rdef, new)
        meta = new.get("metadata")
        if not isinstance(meta, dict):
            meta = new["metadata"] = {}
        meta = cast(Obj, meta)
        old_meta = cast(Obj, current["metadata"])
        wanted_rv = meta.get("resourceVersion")
        if wanted_rv and wanted_rv != old_meta["resourceVersion"]:
            raise api_error(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {rdef.qualified} "{name}": the object has been modified; '
                "please apply your changes to the latest version and try again",
                {"name": name, "group": rdef.group, "kind": rdef.plural},
            )
        new = self._carry_over(rdef, request, current, new)
        headers = self._admit(rdef, new, request)
        if new == current:
            return aiohttp.web.json_response(current, headers=headers)
        if spec_part(new) != spec_part(current) and request.subresource != "status":
            new["metadata"]["generation"] = int(old_meta.get("generation") or 1) + 1
        if new["metadata"].get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            await self._remove(rdef, current, new)
            return aiohttp.web.json_response(new, headers=headers)
        await self._commit(rdef, "MODIFIED", current, new)
        return aiohttp.web.json_response(new, headers=headers)

    async def _remove(self, rdef: ResourceDef, old: Obj, last: Obj) -> None:
        await self._commit(rdef, "DELETED", old, last)
        await self._collect_garbage()

    async def _delete(
        self, rdef: ResourceDef, namespace: str | None, name: str
    ) -> aiohttp.web.StreamResponse:
        current = self._get(rdef, namespace, name)
        meta = current["metadata"]
        if meta.get("finalizers"):
            if not meta.get("deletionTimestamp"):
                new = copy.deepcopy(current)
                new["metadata"]["deletionTimestamp"] = now()
                await self._commit(rdef, "MODIFIED", current, new)
                return aiohttp.web.json_response(new, status=202)
            return aiohttp.web.json_response(current, status=202)
        await self._remove(rdef, current, copy.deepcopy(current))
        if rdef.group.endswith("x-k8s.io"):  # custom resources answer with the deleted object
            return aiohttp.web.json_response(current)
        return aiohttp.web.json_response(
            {
                "apiVersion": "v1",
                "kind": "Status",
                "metadata": {},
                "status": "Success",
                "details": {"name": name, "group": rdef.group, "kind": rdef.plural, "uid": meta.get("uid")},
            }
        )

    async def _delete_collection(
        self, rdef: ResourceDef, request: kmock.Request
    ) -> aiohttp.web.StreamResponse:
        matches = self._selector(request)
        items = [o for o in self._all(rdef, request.namespace) if matches(o)]
        for obj in items:
            if self._stored(rdef, obj["metadata"].get("namespace"), obj["metadata"]["name"]) is not None:
                await self._delete(rdef, obj["metadata"].get("namespace"), obj["metadata"]["name"])
        return aiohttp.web.json_response(self._list_body(rdef, items))

    async def _collect_garbage(self) -> None:
        """Delete objects whose every ownerReference points at an object that no longer exists."""
        while True:
            live: set[str] = set()
            dependents: list[tuple[ResourceDef, Obj]] = []
            for rdef in self._defs.values():
                for obj in self._all(rdef, None):
                    live.add(obj["metadata"]["uid"])
                    if obj["metadata"].get("ownerReferences"):
                        dependents.append((rdef, obj))
            orphans = [
                (rdef, obj)
                for rdef, obj in dependents
                if not any(ref.get("uid") in live for ref in obj["metadata"]["ownerReferences"])
            ]
            if not orphans:
                return
            for rdef, obj in orphans:
                meta = obj["metadata"]
                if self._stored(rdef, meta.get("namespace"), meta["name"]) is not None:
                    await self._delete(rdef, meta.get("namespace"), meta["name"])

    # ---------------------------------------------------------------------------------------
    # list and watch
    # ---------------------------------------------------------------------------------------

    @staticmethod
    def _selector(request: kmock.Request) -> Any:
        try:
            labels = parse_label_selector(request.params.get("labelSelector"))
            fields = parse_field_selector(request.params.get("fieldSelector"))
        except SelectorError as exc:
            raise api_error(400, "BadRequest", str(exc)) from None

        def matches(obj: Obj) -> bool:
            return labels(obj) and fields(obj)

        return matches

    def _list_body(self, rdef: ResourceDef, items: list[Obj]) -> Obj:
        return {
            "apiVersion": rdef.api_version,
            "kind": f"{rdef.kind}List",
            "metadata": {"resourceVersion": str(self._rv)},
            "items": items,
        }

    async def _list(self, rdef: ResourceDef, request: kmock.Request) -> aiohttp.web.StreamResponse:
        matches = self._selector(request)
        items = [o for o in self._all(rdef, request.namespace) if matches(o)]
        return aiohttp.web.json_response(self._list_body(rdef, items))

    @staticmethod
    def _translate(
        event: WatchEvent, request: kmock.Request, key: tuple[str, str, str], matches: Any
    ) -> str | None:
        """What a watcher with this selector sees of ``event`` (None: nothing)."""
        if event.key != key or (request.namespace is not None and event.namespace != request.namespace):
            return None
        was = event.old is not None and bool(matches(event.old))
        now = event.type != "DELETED" and bool(matches(event.new))
        if event.type == "DELETED":
            return "DELETED" if was else None
        if now:
            return "MODIFIED" if was else "ADDED"
        return "DELETED" if was else None  # stopped matching the selector

    async def _wait_for_change(self, next_rv: int, left: float | None) -> None:
        if self._changed is None:
            self._changed = asyncio.Condition()
        async with self._changed:
            if next_rv > self._rv and not self._stopping:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._changed.wait(), timeout=left)

    async def _watch(self, rdef: ResourceDef, request: kmock.Request) -> aiohttp.web.StreamResponse:
        matches = self._selector(request)
        raw = request._raw_request  # pyright: ignore[reportPrivateUsage]
        assert raw is not None
        timeout = request.params.get("timeoutSeconds")
        deadline = time.monotonic() + float(timeout) if timeout else None
        since = str(request.params.get("resourceVersion") or "0")
        response = aiohttp.web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
        await response.prepare(raw)
        key = (rdef.group, rdef.version, rdef.plural)

        async def send(kind: str, obj: Obj) -> None:
            await response.write(json.dumps({"type": kind, "object": obj}).encode() + b"\n")

        try:
            next_rv = int(since) + 1 if since.isdigit() and since != "0" else self._rv + 1
            if since in ("0", ""):  # no version: the current state first, as ADDED events
                for obj in self._all(rdef, request.namespace):
                    if matches(obj):
                        await send("ADDED", obj)
            while not self._stopping:
                if next_rv < self._log_first:  # too old (or this watcher fell behind the kept history)
                    gone = {
                        "kind": "Status",
                        "apiVersion": "v1",
                        "metadata": {},
                        "status": "Failure",
                        "code": 410,
                    }
                    gone |= {"reason": "Expired", "message": f"too old resource version: {next_rv - 1}"}
                    await send("ERROR", gone)
                    return response
                while next_rv <= self._rv and not self._stopping:
                    event = self._log[next_rv - self._log_first]
                    next_rv += 1
                    seen = self._translate(event, request, key, matches)
                    if seen is not None:
                        await send(seen, event.new)
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    break
                await self._wait_for_change(next_rv, left)
        except (ConnectionResetError, ConnectionError):
            return response
        return response
