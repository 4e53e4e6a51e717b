"""``SandboxController``: the Agent Sandbox controller and the kubelet, for tests.

It talks to a :class:`ClusterEmulator` only through the official ``kubernetes`` client (informers:
list + watch of SandboxClaims, SandboxWarmPools, SandboxTemplates and Sandboxes, waking a
level-triggered reconcile loop; a resync runs every ``resync`` seconds anyway) and backs every
Sandbox with a real Docker container (see :mod:`._pods`). What it does, per namespace (``v1beta1`` objects):

- **SandboxWarmPool** -> keeps ``spec.replicas`` unclaimed Sandboxes made from the pool's
  SandboxTemplate (owned by the pool, label ``agents.x-k8s.io/warm-pool=<pool>``), deletes extras,
  reports ``status.replicas/readyReplicas/selector``.
- **Sandbox** -> a container; ``status.podIPs: ["127.0.0.1"]``, condition ``Ready`` (True once the
  readiness probe passes; False with the reason when the container failed or was killed) and the
  annotation ``harness-run.dev/worker-port`` (its port on the host network).
- **SandboxClaim** (``spec.warmPoolRef.name``) -> adopts a Ready unclaimed Sandbox of that pool
  (else one still starting, else cold-starts a Sandbox named after the claim from the pool's
  template): the claim's ``additionalPodMetadata`` goes into the Sandbox's metadata and into the
  pod's downward-API ``annotations`` file *before* the claim is reported Ready; the claim gets
  ``status.sandbox.name/podIPs`` and condition ``Ready``; the pool refills. A claim whose pool does
  not exist stays ``Ready=False`` (reason ``WarmPoolNotFound``, naming the pool).
- Deleting a claim or pool deletes what it owns (the emulator's garbage collector, via
  ownerReferences); a Sandbox that is gone loses its container.

``kill_sandbox(name)`` kills a sandbox's container (Ready turns False; it is not restarted);
``stop()`` removes every container the controller started.
"""

from __future__ import annotations

import contextlib
import copy
import logging
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, cast

from harness_run.errors import InfrastructureError
from harness_run.vocab import k8s
from testkit.cluster._informer import Informer
from testkit.cluster._pods import Pod, PodRuntime

if TYPE_CHECKING:
    from testkit.cluster._emulator import ClusterEmulator

__all__ = ["LABEL_CLAIM", "LABEL_POOL", "SandboxController"]

Obj = dict[str, Any]
LABEL_POOL = "agents.x-k8s.io/warm-pool"
LABEL_CLAIM = "agents.x-k8s.io/claim"
POD_IP = "127.0.0.1"
_log = logging.getLogger(__name__)


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _meta(obj: Obj) -> Obj:
    return cast(Obj, obj.setdefault("metadata", {}))


def _key(obj: Obj) -> tuple[str, str]:
    meta = _meta(obj)
    return str(meta.get("namespace") or "default"), str(meta["name"])


def _owner(obj: Obj, kind: k8s.Kind) -> Obj:
    meta = _meta(obj)
    return {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _owned_by(obj: Obj, owner: Obj) -> bool:
    uid = _meta(owner).get("uid")
    return any(ref.get("uid") == uid for ref in _meta(obj).get("ownerReferences") or [])


def _condition(existing: Obj | None, status: bool, reason: str, message: str) -> list[Obj]:
    value = "True" if status else "False"
    conditions = cast(list[Obj], (existing or {}).get("conditions") or [])
    old = next((c for c in conditions if c.get("type") == "Ready"), None)
    since = old["lastTransitionTime"] if old and old.get("status") == value else _now()
    return [
        {
            "type": "Ready",
            "status": value,
            "reason": reason,
            "message": message[:32000],
            "lastTransitionTime": since,
        }
    ]


def _is_ready(obj: Obj) -> bool:
    conditions = cast(list[Obj], (obj.get("status") or {}).get("conditions") or [])
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


class SandboxController:
    """Plays the Agent Sandbox controller + kubelet against a :class:`ClusterEmulator` (starts at once).

    - ``extra_env``: added to every container's env (e.g. ``HARNESS_RUN_STORE``, the scripted
      model's URL); ``HARNESS_RUN_WORKER_PORT`` is always the sandbox's own port and
      ``HARNESS_RUN_WORKER_HOST`` defaults to 127.0.0.1.
    - ``labels``: Docker labels on every container (e.g. the test session's cleanup label).
    - ``startup_timeout``: a container not Ready by then is reported Failed.
    """

    def __init__(
        self,
        emulator: ClusterEmulator,
        docker_client: Any,
        *,
        extra_env: Mapping[str, str] | None = None,
        labels: Mapping[str, str] | None = None,
        resync: float = 1.0,
        startup_timeout: float = 120.0,
    ) -> None:
        import kubernetes.client

        self._api = kubernetes.client.CustomObjectsApi(emulator.api_client())
        self._runtime = PodRuntime(
            docker_client,
            extra_env=dict(extra_env or {}),
            labels=dict(labels or {}),
            on_change=self._wake_up,
            startup_timeout=startup_timeout,
        )
        self._resync = resync
        self._pods: dict[tuple[str, str], Pod] = {}
        self._view: dict[tuple[str, str], Obj] = {}  # this reconcile's Sandboxes
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self.errors: list[str] = []
        self.late_podinfo = False
        """True: a claimed warm pod's annotations file is not refreshed (a kubelet between syncs)."""
        self.podinfo_skipped: list[str] = []
        """Sandboxes claimed while ``late_podinfo`` was on (their file names no claim token)."""
        self._informers = {
            kind.plural: Informer(self._api, kind, self._wake_up)
            for kind in (k8s.SANDBOX_CLAIM, k8s.SANDBOX_WARM_POOL, k8s.SANDBOX_TEMPLATE, k8s.SANDBOX)
        }
        self._threads = [
            threading.Thread(target=self._loop, name="sandbox-controller", daemon=True),
            threading.Thread(target=self._liveness, name="sandbox-liveness", daemon=True),
        ]
        for informer in self._informers.values():
            self._threads.append(
                threading.Thread(
                    target=informer.run,
                    args=(self._stopping,),
                    name=f"informer-{informer.kind.plural}",
                    daemon=True,
                )
            )
        for thread in self._threads:
            thread.start()

    # ------------------------------------------------------------------------------------------
    # public
    # ------------------------------------------------------------------------------------------

    def pod(self, name: str, namespace: str = "default") -> Pod | None:
        """What the kubelet knows of a sandbox's pod (port, container id, state), or None."""
        return self._pods.get((namespace, name))

    def containers(self) -> list[str]:
        """Ids of the containers of the current sandboxes."""
        return [p.container_id for p in list(self._pods.values()) if p.container_id and not p.removed]

    def kill_sandbox(self, name: str, namespace: str = "default", *, wait: float = 10.0) -> None:
        """Kill the sandbox's container (a fault); waits until its ``Ready`` condition is False."""
        pod = self._pods.get((namespace, name))
        if pod is None:
            raise InfrastructureError(f"no running sandbox {namespace}/{name}: nothing to kill")
        self._runtime.kill(pod)
        self._wake_up()
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            obj = self._get(k8s.SANDBOX, namespace, name)
            if obj is None or not _is_ready(obj):
                return
            time.sleep(0.02)
        raise InfrastructureError(f"sandbox {namespace}/{name} still reports Ready {wait}s after the kill")

    def stop(self) -> None:
        """Stop reconciling and remove every container this controller started; idempotent."""
        self._stopping.set()
        self._wake.set()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout=5)
        self._runtime.close()
        self._pods.clear()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # ------------------------------------------------------------------------------------------
    # loops
    # ------------------------------------------------------------------------------------------

    def _wake_up(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        for informer in self._informers.values():
            while not (informer.synced.wait(0.1) or self._stopping.is_set()):
                pass
        while not self._stopping.is_set():
            self._wake.wait(timeout=self._resync)
            self._wake.clear()
            if self._stopping.is_set():
                return
            try:
                self._reconcile()
            except Exception as exc:
                if self._stopping.is_set():
                    return
                self.errors.append(repr(exc))
                _log.warning("sandbox controller: reconcile failed: %r", exc)
                time.sleep(0.05)
                self._wake.set()

    def _liveness(self) -> None:
        """Notice containers that died on their own (every 0.5 s)."""
        while not self._stopping.wait(0.5):
            with contextlib.suppress(Exception):
                if self._runtime.poll(list(self._pods.values()), every=0.0):
                    self._wake_up()

    # ------------------------------------------------------------------------------------------
    # API helpers (writes go through to the informers' caches)
    # ------------------------------------------------------------------------------------------

    def _get(self, kind: k8s.Kind, namespace: str, name: str) -> Obj | None:
        import kubernetes.client

        try:
            return cast(
                Obj,
                self._api.get_namespaced_custom_object(
                    kind.group, kind.version, namespace, kind.plural, name
                ),
            )
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise

    def _patch(self, kind: k8s.Kind, obj: Obj, body: Obj, *, status: bool = False) -> Obj | None:
        import kubernetes.client

        namespace, name = _key(obj)
        call = (
            self._api.patch_namespaced_custom_object_status
            if status
            else self._api.patch_namespaced_custom_object
        )
        try:
            updated = cast(Obj, call(kind.group, kind.version, namespace, kind.plural, name, body))
        except kubernetes.client.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        self._informers[kind.plural].put(updated)
        return updated

    def _set_status(self, kind: k8s.Kind, obj: Obj, status: Obj) -> Obj:
        current = cast(Obj, obj.get("status") or {})
        if all(current.get(k) == v for k, v in status.items()):
            return obj
        return self._patch(kind, obj, {"status": status}, status=True) or obj

    def _create_sandbox(self, body: Obj) -> Obj:
        namespace = str(body["metadata"]["namespace"])
        kind = k8s.SANDBOX
        created = cast(
            Obj,
            self._api.create_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural, body),
        )
        self._informers[kind.plural].put(created)
        return created

    def _delete_sandbox(self, sandbox: Obj) -> None:
        import kubernetes.client

        namespace, name = _key(sandbox)
        kind = k8s.SANDBOX
        try:
            self._api.delete_namespaced_custom_object(kind.group, kind.version, namespace, kind.plural, name)
        except kubernetes.client.ApiException as exc:
            if exc.status != 404:
                raise
        self._informers[kind.plural].drop(sandbox)

    # ------------------------------------------------------------------------------------------
    # reconcile
    # ------------------------------------------------------------------------------------------

    def _reconcile(self) -> None:
        pools = self._informers[k8s.SANDBOX_WARM_POOL.plural].snapshot()
        templates = self._informers[k8s.SANDBOX_TEMPLATE.plural].snapshot()
        sandboxes = self._informers[k8s.SANDBOX.plural].snapshot()
        claims = self._informers[k8s.SANDBOX_CLAIM.plural].snapshot()
        self._view = sandboxes
        self._sync_pods(sandboxes)
        # Sandbox status first: a pool or claim is never reported Ready before its Sandbox is.
        for key, sandbox in list(sandboxes.items()):
            sandboxes[key] = self._sync_sandbox_status(sandbox)
        for claim in sorted(claims.values(), key=lambda c: str(_meta(c).get("creationTimestamp"))):
            self._reconcile_claim(claim, pools, templates, sandboxes)
        for pool in pools.values():
            self._reconcile_pool(pool, templates, sandboxes)

    def _sync_pods(self, sandboxes: dict[tuple[str, str], Obj]) -> None:
        for key, pod in list(self._pods.items()):
            sandbox = sandboxes.get(key)
            if (
                sandbox is None
                or _meta(sandbox).get("uid") != pod.uid
                or _meta(sandbox).get("deletionTimestamp")
            ):
                self._runtime.remove(pod)
                del self._pods[key]
        for key, sandbox in list(sandboxes.items()):
            meta = _meta(sandbox)
            spec = cast(Obj, sandbox.get("spec") or {})
            if key in self._pods or meta.get("deletionTimestamp") or spec.get("operatingMode") == "Suspended":
                continue
            template = copy.deepcopy(cast(Obj, spec.get("podTemplate") or {}))
            template_meta = cast(Obj, template.setdefault("metadata", {}))
            template_meta["annotations"] = {
                **cast(Obj, template_meta.get("annotations") or {}),
                **cast(Obj, meta.get("annotations") or {}),
            }
            template_meta["annotations"].pop(k8s.ANNOTATION_WORKER_PORT, None)
            pod = self._runtime.start(key[0], key[1], str(meta["uid"]), template)
            self._pods[key] = pod
            port = {"metadata": {"annotations": {k8s.ANNOTATION_WORKER_PORT: str(pod.port)}}}
            updated = self._patch(k8s.SANDBOX, sandbox, port)
            if updated is not None:
                sandboxes[key] = updated

    def _sync_sandbox_status(self, sandbox: Obj) -> Obj:
        if _meta(sandbox).get("deletionTimestamp"):
            return sandbox
        pod = self._pods.get(_key(sandbox))
        if pod is None:
            reason, message = "Suspended", "the sandbox is suspended"
        else:
            reasons = {"Ready": "PodReady", "Pending": "PodNotReady", "Killed": "PodKilled"}
            reason, message = reasons.get(pod.state, "PodFailed"), pod.message or "the sandbox is ready"
        status: Obj = {
            "conditions": _condition(sandbox.get("status"), bool(pod and pod.ready), reason, message)
        }
        status["podIPs"] = [POD_IP] if pod is not None and pod.state in ("Ready", "Pending") else []
        return self._set_status(k8s.SANDBOX, sandbox, status)

    def _pool_members(self, pool: Obj, sandboxes: dict[tuple[str, str], Obj]) -> list[Obj]:
        namespace, name = _key(pool)
        return [
            s
            for (ns, _n), s in sandboxes.items()
            if ns == namespace
            and (_meta(s).get("labels") or {}).get(LABEL_POOL) == name
            and _owned_by(s, pool)
            and not _meta(s).get("deletionTimestamp")
        ]

    def _new_sandbox(self, template: Obj, name: str, owner: Obj, owner_kind: k8s.Kind, labels: Obj) -> Obj:
        pod_template = copy.deepcopy(
            cast(Obj, cast(Obj, template.get("spec") or {}).get("podTemplate") or {})
        )
        meta: Obj = {
            "namespace": _key(owner)[0],
            "labels": labels,
            "ownerReferences": [_owner(owner, owner_kind)],
        }
        meta["generateName" if name.endswith("-") else "name"] = name
        spec: Obj = {"podTemplate": pod_template}
        return self._create_sandbox(
            {"apiVersion": k8s.SANDBOX.api_version, "kind": k8s.SANDBOX.kind, "metadata": meta, "spec": spec}
        )

    def _reconcile_pool(
        self, pool: Obj, templates: dict[tuple[str, str], Obj], sandboxes: dict[tuple[str, str], Obj]
    ) -> None:
        namespace, name = _key(pool)
        spec = cast(Obj, pool.get("spec") or {})
        replicas = int(spec.get("replicas", 1))
        members = self._pool_members(pool, sandboxes)
        template = templates.get((namespace, str((spec.get("sandboxTemplateRef") or {}).get("name"))))
        if template is not None and len(members) < replicas and not _meta(pool).get("deletionTimestamp"):
            for _ in range(replicas - len(members)):
                created = self._new_sandbox(
                    template, f"{name[:57]}-", pool, k8s.SANDBOX_WARM_POOL, {LABEL_POOL: name}
                )
                sandboxes[_key(created)] = created
                members.append(created)
            self._sync_pods(sandboxes)
        elif len(members) > replicas:
            ranked = sorted(members, key=lambda s: (self._ready(s), _meta(s).get("creationTimestamp", "")))
            for extra in ranked[: len(members) - replicas]:
                self._delete_sandbox(extra)
                sandboxes.pop(_key(extra), None)
                members.remove(extra)
        status = {
            "replicas": len(members),
            "readyReplicas": sum(1 for s in members if self._ready(s)),
            "selector": f"{LABEL_POOL}={name}",
            "observedGeneration": int(_meta(pool).get("generation") or 1),
        }
        self._set_status(k8s.SANDBOX_WARM_POOL, pool, status)

    def _ready(self, sandbox: Obj) -> bool:
        """Ready as the API shows it (the Sandbox's condition), not as the kubelet knows it."""
        return _is_ready(sandbox)

    def _claim_status(self, claim: Obj, sandbox_name: str | None, reason: str, message: str) -> None:
        namespace = _key(claim)[0]
        pod = self._pods.get((namespace, sandbox_name)) if sandbox_name else None
        sandbox = self._view.get((namespace, sandbox_name)) if sandbox_name else None
        ready = pod is not None and sandbox is not None and _is_ready(sandbox)
        if ready:
            reason, message = "SandboxReady", f"sandbox {sandbox_name} is ready"
        status: Obj = {"conditions": _condition(claim.get("status"), ready, reason, message)}
        if sandbox_name:
            alive = pod is not None and pod.state in ("Ready", "Pending")
            status["sandbox"] = {"name": sandbox_name, "podIPs": [POD_IP] if alive else []}
        self._set_status(k8s.SANDBOX_CLAIM, claim, status)

    def _reconcile_claim(
        self,
        claim: Obj,
        pools: dict[tuple[str, str], Obj],
        templates: dict[tuple[str, str], Obj],
        sandboxes: dict[tuple[str, str], Obj],
    ) -> None:
        if _meta(claim).get("deletionTimestamp"):
            return
        namespace, claim_name = _key(claim)
        bound = cast(Obj, (claim.get("status") or {}).get("sandbox") or {}).get("name")
        if bound:
            pod = self._pods.get((namespace, bound))
            if (namespace, bound) not in sandboxes:
                self._claim_status(claim, bound, "SandboxDeleted", f"sandbox {bound} no longer exists")
            else:
                detail = pod.message if pod is not None else "no pod"
                self._claim_status(claim, bound, "SandboxNotReady", f"sandbox {bound} is not ready: {detail}")
            return
        spec = cast(Obj, claim.get("spec") or {})
        pool_name = str((spec.get("warmPoolRef") or {}).get("name") or "")
        pool = pools.get((namespace, pool_name))
        if pool is None:
            message = f"SandboxWarmPool {namespace}/{pool_name} does not exist"
            self._claim_status(claim, None, "WarmPoolNotFound", message)
            return
        extra = cast(Obj, spec.get("additionalPodMetadata") or {})
        annotations = cast(dict[str, str], extra.get("annotations") or {})
        labels = {**cast(dict[str, str], extra.get("labels") or {}), LABEL_CLAIM: claim_name}
        usable = [
            s
            for s in self._pool_members(pool, sandboxes)
            if (p := self._pods.get(_key(s))) is None or p.state in ("Ready", "Pending")
        ]
        usable.sort(key=lambda s: (not self._ready(s), _meta(s).get("creationTimestamp", "")))
        if usable:
            name = self._adopt(usable[0], claim, annotations, labels, sandboxes)
        else:
            name = self._cold_start(claim, pool, templates, annotations, labels, sandboxes)
        if name is not None:
            self._claim_status(claim, name, "SandboxNotReady", f"sandbox {name} is starting")

    def _adopt(
        self,
        sandbox: Obj,
        claim: Obj,
        annotations: dict[str, str],
        labels: dict[str, str],
        sandboxes: dict[Any, Obj],
    ) -> str | None:
        pod = self._pods.get(_key(sandbox))
        if pod is not None and self.late_podinfo:  # a kubelet that has not synced the files yet
            self.podinfo_skipped.append(str(_meta(sandbox).get("name")))
        elif pod is not None:  # the kubelet refreshes the downward-API files before anyone sees Ready
            self._runtime.write_podinfo(pod, {**pod.annotations, **annotations})
        patch: Obj = {
            "metadata": {
                "labels": {LABEL_POOL: None, **labels},
                "annotations": annotations,
                "ownerReferences": [_owner(claim, k8s.SANDBOX_CLAIM)],
            },
            "spec": {"podTemplate": {"metadata": {"annotations": annotations, "labels": labels}}},
        }
        updated = self._patch(k8s.SANDBOX, sandbox, patch)
        if updated is None:
            return None
        sandboxes[_key(updated)] = updated
        return _key(updated)[1]

    def _cold_start(
        self,
        claim: Obj,
        pool: Obj,
        templates: dict[tuple[str, str], Obj],
        annotations: dict[str, str],
        labels: dict[str, str],
        sandboxes: dict[tuple[str, str], Obj],
    ) -> str | None:
        namespace, claim_name = _key(claim)
        ref = cast(Obj, cast(Obj, pool.get("spec") or {}).get("sandboxTemplateRef") or {})
        template = templates.get((namespace, str(ref.get("name"))))
        if template is None:
            message = f"SandboxTemplate {namespace}/{ref.get('name')} does not exist"
            self._claim_status(claim, None, "TemplateNotFound", message)
            return None
        template = copy.deepcopy(template)
        pod_meta = cast(Obj, template["spec"]["podTemplate"].setdefault("metadata", {}))
        pod_meta["annotations"] = {**cast(Obj, pod_meta.get("annotations") or {}), **annotations}
        pod_meta["labels"] = {**cast(Obj, pod_meta.get("labels") or {}), **labels}
        name = f"{claim_name[:57]}-" if (namespace, claim_name) in sandboxes else claim_name
        created = self._new_sandbox(template, name, claim, k8s.SANDBOX_CLAIM, labels)
        sandboxes[_key(created)] = created
        self._sync_pods(sandboxes)
        return _key(created)[1]
