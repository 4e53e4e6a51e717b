"""A thin, typed layer over the official ``kubernetes`` client (imported lazily).

Every call is blocking (the client is synchronous); the async runtime calls these in threads.
Objects are plain dicts (manifests as the compiler makes them); errors become
:class:`~harness_run.errors.InfrastructureError` with the object named, or :class:`KubeStatus`
where the caller decides (404, 409, 422).
"""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

from harness_run.errors import InfrastructureError, UsageError
from harness_run.vocab import k8s

__all__ = ["Kube", "KubeStatus", "Obj", "as_list", "as_obj", "load_api_client"]

Obj = dict[str, Any]
"""A Kubernetes object (or any JSON object in one) as the API sends it."""


def as_obj(value: object) -> Obj:
    """``value`` if it is a JSON object, else ``{}``: a typed step into an API object's fields
    (``as_obj(as_obj(claim.get("status")).get("sandbox")).get("name")``)."""
    return cast(Obj, value) if isinstance(value, dict) else {}


def as_list(value: object) -> list[Any]:
    """``value`` if it is a JSON array, else ``[]``."""
    return cast(list[Any], value) if isinstance(value, list) else []


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
        self.status = status
        super().__init__(message, retryable=status >= 500 or status == 429)


def load_api_client(api_client: Any = None) -> Any:
    """``api_client`` as given, else one from ``$KUBECONFIG`` / ``~/.kube/config`` / in-cluster."""
    if api_client is not None:
        return api_client
    try:
        from kubernetes import client, config
    except ImportError:
        raise UsageError(
            "the sandbox runtime needs the kubernetes client: pip install 'harness-run[sandbox]'"
        ) from None
    loader: Any = config  # the client's config loaders are untyped
    try:
        if os.environ.get("KUBERNETES_SERVICE_HOST") and not os.environ.get("KUBECONFIG"):
            loader.load_incluster_config()
            return client.ApiClient()
        return loader.new_client_from_config(config_file=os.environ.get("KUBECONFIG") or None)
    except Exception as exc:
        raise UsageError(
            f"no Kubernetes cluster configured ({exc}); set KUBECONFIG (e.g. after "
            "`gcloud container clusters get-credentials CLUSTER`) or pass api_client="
        ) from None


def kind_of(obj: Mapping[str, Any]) -> k8s.Kind:
    kind = _KINDS.get(str(obj.get("kind")))
    if kind is None:
        raise UsageError(f"harness-run does not apply objects of kind {obj.get('kind')!r}")
    return kind


def _path(kind: k8s.Kind, namespace: str, name: str | None = None) -> str:
    base = f"/api/{kind.version}" if not kind.group else f"/apis/{kind.group}/{kind.version}"
    path = f"{base}/namespaces/{namespace}/{kind.plural}"
    return f"{path}/{name}" if name else path


class Kube:
    """One namespace of one cluster, through ``kubernetes.client.ApiClient``."""

    def __init__(self, api_client: Any, namespace: str) -> None:
        self.api = api_client
        self.namespace = namespace
        self._lock = threading.Lock()

    @property
    def server(self) -> str:
        return str(getattr(self.api.configuration, "host", "?"))

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
        try:
            params = self.api.param_serialize(
                method=method,
                resource_path=path,
                query_params=query or [],
                header_params=headers,
                body=body,
                auth_settings=["BearerToken"],
            )
            resp = self.api.call_api(*params, _request_timeout=timeout)
            resp.read()
        except ApiException as exc:
            status: int | None = getattr(exc, "status", None)  # untyped fields of the client
            reason: str | None = getattr(exc, "reason", None)
            raise KubeStatus(f"{method} {path}: HTTP {status} {reason}", int(status or 0)) from None
        except Exception as exc:
            raise InfrastructureError(
                f"the Kubernetes API at {self.server} is unreachable ({type(exc).__name__}: {exc}); "
                "check KUBECONFIG and the cluster",
                retryable=True,
            ) from None
        text = resp.data.decode(errors="replace") if resp.data else ""
        if not 200 <= resp.status <= 299:
            raise KubeStatus(f"{method} {path}: HTTP {resp.status}: {_status_message(text)}", resp.status)
        return json.loads(text) if text else {}

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
        items = [as_obj(i) for i in as_list(data.get("items"))]
        wanted = dict(labels or {})
        # filter again: not every API server (or emulator) honours label selectors
        return [
            i
            for i in items
            if all(as_obj(as_obj(i.get("metadata")).get("labels")).get(k) == v for k, v in wanted.items())
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
            version = as_obj(as_obj(obj).get("metadata")).get("resourceVersion")
            for event_type, item in self._watch(kind, name, str(version or "") or None, min(left, 30)):
                obj = None if event_type == "DELETED" else item
                if ready(obj) or time.monotonic() >= deadline or (stop is not None and stop.is_set()):
                    break
            else:
                obj = self.get(kind, name)  # the watch ended: re-read (it may have changed meanwhile)

    def _watch(
        self, kind: k8s.Kind, name: str, version: str | None, timeout: float
    ) -> Iterator[tuple[str, Obj]]:
        from kubernetes import client, watch

        api = client.CustomObjectsApi(self.api)
        kwargs: dict[str, Any] = {
            "field_selector": f"metadata.name={name}",
            "timeout_seconds": max(1, int(timeout)),
            "_request_timeout": timeout + 5,
        }
        if version:
            kwargs["resource_version"] = str(version)
        w: Any = watch.Watch()  # untyped: its events are plain dicts
        try:
            stream: Iterator[object] = w.stream(
                api.list_namespaced_custom_object,
                kind.group,
                kind.version,
                self.namespace,
                kind.plural,
                **kwargs,
            )
            for raw_event in stream:
                event = as_obj(raw_event)
                item = as_obj(event.get("raw_object") or event.get("object"))
                if not item or as_obj(item.get("metadata")).get("name") != name:
                    continue  # not an object event, or an API server that ignores field selectors
                yield str(event.get("type")), item
        except Exception:
            return  # the caller re-reads and watches again
        finally:
            w.stop()


def _selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def _status_message(text: str) -> str:
    try:
        data = json.loads(text)
    except ValueError:
        return text[:300]
    if isinstance(data, dict) and "message" in data:
        return str(data["message"])[:1000]  # pyright: ignore[reportUnknownArgumentType]
    return text[:300]


def _named(exc: KubeStatus, kind: k8s.Kind, name: str) -> KubeStatus:
    hint = {
        403: "the deploying identity lacks RBAC permissions for it",
        404: f"the cluster does not serve {kind.api_version} (install Agent Sandbox / the CRDs)",
        422: "the API server rejected the object",
    }.get(exc.status, "")
    text = f"applying {kind.kind} {name!r} failed: {exc}"
    return KubeStatus(f"{text}; {hint}" if hint else text, exc.status)
