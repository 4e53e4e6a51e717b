"""A thin, typed layer over the official ``kubernetes`` client (imported lazily).

Every call is blocking (the client is synchronous); the async runtime calls these in threads. The
client is made on first use (``connect``), so an engine that only reads history never needs a
cluster. Objects are plain dicts (manifests as the compiler makes them), read with the typed
helpers :func:`get_map`, :func:`get_list` and :func:`get_str`; errors become
:class:`~harness_run.errors.InfrastructureError` with the object named, or :class:`KubeStatus`
where the caller decides (404, 409, 422).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Protocol, cast

from harness_run import telemetry
from harness_run.errors import InfrastructureError, UsageError
from harness_run.vocab import k8s

__all__ = ["Kube", "KubeStatus", "get_list", "get_map", "get_str"]

Obj = dict[str, Any]
"""A Kubernetes object (or any JSON object in one) as the API sends it."""


_KINDS: dict[str, k8s.Kind] = {
    kind.kind: kind
    for kind in (
        k8s.SANDBOX,
        k8s.SANDBOX_TEMPLATE,
        k8s.SANDBOX_CLAIM,
        k8s.SANDBOX_WARM_POOL,
        k8s.SERVICE_ACCOUNT,
        k8s.NETWORK_POLICY,
        k8s.FQDN_NETWORK_POLICY,
    )
}


class KubeStatus(InfrastructureError):
    """The API server refused a request: ``status`` is the HTTP code (404, 409, 422, …)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message, retryable=status >= 500 or status == 429, status=status)


def kind_of(obj: Mapping[str, Any]) -> k8s.Kind:
    kind = _KINDS.get(str(obj.get("kind")))
    if kind is None:
        raise UsageError(f"harness-run does not apply objects of kind {obj.get('kind')!r}")
    return kind


def _path(kind: k8s.Kind, namespace: str, name: str | None = None) -> str:
    base = f"/api/{kind.version}" if not kind.group else f"/apis/{kind.group}/{kind.version}"
    path = f"{base}/namespaces/{namespace}/{kind.plural}"
    return f"{path}/{name}" if name else path


def get_map(obj: Mapping[str, Any] | None, *path: str) -> Obj:
    """The mapping at ``path`` in ``obj`` (``{}`` where anything on the way is missing or not a mapping)."""
    current: object = obj
    for key in path:
        current = cast("Mapping[str, object]", current).get(key) if isinstance(current, Mapping) else None
    return cast("Obj", current) if isinstance(current, dict) else {}


def get_list(obj: Mapping[str, Any] | None, *path: str) -> list[Obj]:
    """The mappings in the list at ``path`` in ``obj`` (non-mapping entries skipped)."""
    parent = get_map(obj, *path[:-1]) if path else {}
    value: object = parent.get(path[-1]) if path else None
    if not isinstance(value, list):
        return []
    return [cast("Obj", v) for v in cast("list[object]", value) if isinstance(v, dict)]


def get_str(obj: Mapping[str, Any] | None, *path: str) -> str:
    """The scalar at ``path`` in ``obj`` as a string (``""`` when missing or None)."""
    value: object = get_map(obj, *path[:-1]).get(path[-1]) if path else None
    return "" if value is None or isinstance(value, dict | list) else str(value)


class Kube:
    """One namespace of one cluster, through ``kubernetes.client.ApiClient``.

    Give a client, or ``connect`` (called once, on the first request) to make one.
    """

    def __init__(
        self, api_client: Any = None, namespace: str = "default", *, connect: Callable[[], Any] | None = None
    ) -> None:
        if api_client is None and connect is None:
            raise TypeError("Kube needs an api_client or a connect function")
        self._api: Any = api_client
        self._connect = connect
        self.namespace = namespace
        self._lock = threading.Lock()

    @property
    def api(self) -> Any:
        """The ``kubernetes.client.ApiClient`` (made now if this is the first use)."""
        if self._api is None:
            with self._lock:
                if self._api is None and self._connect is not None:
                    self._api = self._connect()
        return self._api

    @property
    def connected(self) -> bool:
        return self._api is not None

    @property
    def server(self) -> str:
        if self._api is None:
            return "?"
        return str(getattr(self._api.configuration, "host", "?"))

    def _request(
        self,
        method: str,
        path: str,
        *,
        body: Any = None,
        query: list[tuple[str, str]] | None = None,
        content_type: str = "application/json",
        timeout: float = 30,
    ) -> Obj:
        from kubernetes.client.exceptions import ApiException

        headers = {"Accept": "application/json", "Content-Type": content_type}
        api = self.api  # connects on first use; its errors (no kubeconfig, wrong cluster) pass as they are
        try:
            params = api.param_serialize(
                method=method,
                resource_path=path,
                query_params=query or [],
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            resp = api.call_api(*params, _request_timeout=timeout)
            resp.read()
        except ApiException as exc:
            status = int(getattr(exc, "status", None) or 0)
            reason = str(getattr(exc, "reason", None) or "")
            raise KubeStatus(f"{method} {path}: HTTP {status} {reason}", status) from None
        except Exception as exc:
            raise InfrastructureError(
                f"the Kubernetes API at {self.server} is unreachable ({type(exc).__name__}: {exc}); "
                "check KUBECONFIG and the cluster",
                retryable=True,
            ) from None
        data: bytes | None = resp.data
        status = int(resp.status)
        body_text = data.decode(errors="replace") if data else ""
        if not 200 <= status <= 299:
            raise KubeStatus(f"{method} {path}: HTTP {status}: {_status_message(body_text)}", status)
        return cast("Obj", json.loads(body_text)) if body_text else {}

    # --- objects ---------------------------------------------------------------------------------

    def get(self, kind: k8s.Kind, name: str) -> Obj | None:
        try:
            return self._request("GET", _path(kind, self.namespace, name))
        except KubeStatus as exc:
            if exc.status == 404:
                return None
            raise

    def create(self, obj: Obj) -> Obj:
        return self._request("POST", _path(kind_of(obj), self.namespace), body=obj)

    @telemetry.traced("harness_run.k8s.apply")
    def apply(self, obj: Obj) -> tuple[str, Obj]:
        """Create ``obj``, or merge-patch it when it exists; returns ("created"|"patched", object)."""
        kind = kind_of(obj)
        name = str(obj["metadata"]["name"])
        try:
            return "created", self.create(obj)
        except KubeStatus as exc:
            if exc.status != 409:
                raise _named(exc, kind, name) from None
        try:
            patched = self._request(
                "PATCH",
                _path(kind, self.namespace, name),
                body=obj,
                content_type="application/merge-patch+json",
            )
        except KubeStatus as exc:
            raise _named(exc, kind, name) from None
        return "patched", patched

    def patch(self, kind: k8s.Kind, name: str, body: Obj) -> Obj:
        """Merge-patch ``name`` with ``body``."""
        return self._request(
            "PATCH", _path(kind, self.namespace, name), body=body, content_type="application/merge-patch+json"
        )

    def delete(self, kind: k8s.Kind, name: str) -> bool:
        """Delete; False if it was already gone."""
        try:
            self._request(
                "DELETE",
                _path(kind, self.namespace, name),
                body={"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Background"},
            )
        except KubeStatus as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def list(self, kind: k8s.Kind, labels: Mapping[str, str] | None = None) -> list[Obj]:
        query = [("labelSelector", _selector(labels))] if labels else []
        data = self._request("GET", _path(kind, self.namespace), query=query)
        wanted = dict(labels or {})
        # filter again: not every API server (or emulator) honours label selectors
        return [
            i
            for i in get_list(data, "items")
            if all(get_map(i, "metadata", "labels").get(k) == v for k, v in wanted.items())
        ]

    def wait_for(
        self,
        kind: k8s.Kind,
        name: str,
        ready: Callable[[Obj | None], bool],
        timeout: float,
        *,
        stop: threading.Event | None = None,
    ) -> Obj | None:
        """Watch ``name`` until ``ready(obj)`` (obj None once deleted); return the last state seen.

        Raises TimeoutError after ``timeout`` seconds. A watch that ends early is re-established.
        """
        import time

        deadline = time.monotonic() + timeout
        obj = self.get(kind, name)
        while True:
            if ready(obj):
                return obj
            left = deadline - time.monotonic()
            if left <= 0 or (stop is not None and stop.is_set()):
                raise TimeoutError(name)
            version = get_str(obj, "metadata", "resourceVersion")
            for event_type, item in self._watch(kind, name, version, min(left, 30)):
                obj = None if event_type == "DELETED" else item
                if ready(obj) or time.monotonic() >= deadline or (stop is not None and stop.is_set()):
                    break
            else:
                obj = self.get(kind, name)  # the watch ended: re-read (it may have changed meanwhile)

    def _watch(
        self, kind: k8s.Kind, name: str, version: str | None, timeout: float
    ) -> Iterator[tuple[str, Obj]]:
        from kubernetes import client, watch

        api: Any = client.CustomObjectsApi(self.api)  # the SDK is untyped: Any at this boundary
        kwargs: dict[str, Any] = {
            "field_selector": f"metadata.name={name}",
            "timeout_seconds": max(1, int(timeout)),
            "_request_timeout": timeout + 5,
        }
        if version:
            kwargs["resource_version"] = str(version)
        w = cast("_Watch", watch.Watch())
        try:
            stream = w.stream(
                api.list_namespaced_custom_object,
                kind.group,
                kind.version,
                self.namespace,
                kind.plural,
                **kwargs,
            )
            for event in stream:
                if not isinstance(event, dict):
                    continue
                raw = get_map(cast("Obj", event), "raw_object") or get_map(cast("Obj", event), "object")
                if get_str(raw, "metadata", "name") != name:
                    continue  # an API server that ignores field selectors (or a non-object event)
                yield get_str(cast("Obj", event), "type"), raw
        except Exception:
            return  # the caller re-reads and watches again
        finally:
            w.stop()


class _Watch(Protocol):
    """What is used of ``kubernetes.watch.Watch`` (untyped upstream)."""

    def stream(self, func: Callable[..., Any], *args: Any, **kwargs: Any) -> Iterator[object]: ...

    def stop(self) -> None: ...


def _selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _status_message(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return text[:300]
    message = get_str(cast("Obj", data), "message") if isinstance(data, dict) else ""
    return message[:1000] if message else text[:300]


def _named(exc: KubeStatus, kind: k8s.Kind, name: str) -> KubeStatus:
    hint = {
        403: "the deploying identity lacks RBAC permissions for it",
        404: f"the cluster does not serve {kind.api_version} (install Agent Sandbox / the CRDs)",
        422: "the API server rejected the object",
    }.get(exc.status or 0, "")
    text = f"applying {kind.kind} {name!r} failed: {exc}"
    return KubeStatus(f"{text}; {hint}" if hint else text, exc.status or 0)
