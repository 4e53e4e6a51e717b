"""A minimal informer: list once, then watch from that resourceVersion, keeping a local cache.

The controller reads the caches instead of listing on every reconcile and writes its own updates
through (``put``/``drop``), so a reconcile never acts on a view older than its own last write.
Events older than what the cache holds are ignored (resourceVersions here are increasing integers:
this informer only ever talks to the emulator).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any, cast

from harness_run.vocab import k8s

__all__ = ["Informer"]

Obj = dict[str, Any]
Key = tuple[str, str]


def _rv(obj: Obj) -> int:
    value = str((obj.get("metadata") or {}).get("resourceVersion") or "0")
    return int(value) if value.isdigit() else 0


def key_of(obj: Obj) -> Key:
    meta = cast(Obj, obj.get("metadata") or {})
    return str(meta.get("namespace") or "default"), str(meta.get("name"))


class Informer:
    def __init__(self, api: Any, kind: k8s.Kind, on_change: Callable[[], None]) -> None:
        self._api = api
        self.kind = kind
        self._on_change = on_change
        self._items: dict[Key, Obj] = {}
        self._gone: dict[str, int] = {}  # uid -> rv at deletion (late events must not resurrect it)
        self._lock = threading.Lock()
        self.synced = threading.Event()

    def snapshot(self) -> dict[Key, Obj]:
        with self._lock:
            return dict(self._items)

    def put(self, obj: Obj) -> None:
        with self._lock:
            self._apply("MODIFIED", obj)

    def drop(self, obj: Obj) -> None:
        with self._lock:
            self._apply("DELETED", obj)

    def _apply(self, kind: str, obj: Obj) -> None:
        key, rv = key_of(obj), _rv(obj)
        uid = str((obj.get("metadata") or {}).get("uid") or "")
        current = self._items.get(key)
        if kind == "DELETED":
            self._gone[uid] = rv
            if current is not None and (current.get("metadata") or {}).get("uid") == uid:
                del self._items[key]
            return
        if uid in self._gone:
            return
        if current is None or (current.get("metadata") or {}).get("uid") != uid or _rv(current) < rv:
            self._items[key] = obj

    def run(self, stopping: threading.Event) -> None:
        import kubernetes.client
        import kubernetes.watch

        kind = self.kind
        version: str | None = None
        while not stopping.is_set():
            try:
                if version is None:
                    listed = cast(
                        Obj, self._api.list_cluster_custom_object(kind.group, kind.version, kind.plural)
                    )
                    with self._lock:
                        self._items = {key_of(o): o for o in cast(list[Obj], listed["items"])}
                    version = str(listed["metadata"]["resourceVersion"])
                    self.synced.set()
                    self._on_change()
                watch = kubernetes.watch.Watch()
                for event in watch.stream(
                    self._api.list_cluster_custom_object,
                    kind.group,
                    kind.version,
                    kind.plural,
                    resource_version=version,
                    timeout_seconds=1,
                ):
                    event = cast(Obj, event)
                    obj = cast(Obj, event["raw_object"])
                    with self._lock:
                        self._apply(str(event["type"]), obj)
                    version = str(obj["metadata"]["resourceVersion"])
                    self._on_change()
                    if stopping.is_set():
                        watch.stop()
            except kubernetes.client.ApiException:
                version = None  # 410 Gone or similar: list again
                time.sleep(0.05)
            except Exception:
                if stopping.is_set():
                    return
                version = None
                time.sleep(0.2)
