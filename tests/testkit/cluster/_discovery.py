"""API discovery documents (``/api``, ``/apis``, ...) for kubectl and ``kubernetes.dynamic``."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from testkit.cluster._schema import ResourceDef

__all__ = ["discovery"]

Obj = dict[str, Any]


def discovery(defs: Iterable[ResourceDef], path: str) -> Obj | None:
    """/api, /api/v1, /apis, /apis/<group>, /apis/<group>/<version> (for kubectl and dynamic clients)."""
    defs = list(defs)
    groups: dict[str, list[str]] = {}
    for group, version in ((d.group, d.version) for d in defs):
        if version not in groups.setdefault(group, []):
            groups[group].append(version)

    def preferred(group: str) -> str:
        return next((v for v in groups[group] if v == "v1beta1"), groups[group][0])

    def group_doc(group: str) -> Obj:
        return {
            "name": group,
            "versions": [{"groupVersion": f"{group}/{v}", "version": v} for v in groups[group]],
            "preferredVersion": {
                "groupVersion": f"{group}/{preferred(group)}",
                "version": preferred(group),
            },
        }

    parts = [p for p in path.split("/") if p]
    if parts == ["api"]:
        return {"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []}
    if parts == ["apis"]:
        return {
            "kind": "APIGroupList",
            "apiVersion": "v1",
            "groups": [group_doc(g) for g in sorted(groups) if g],
        }
    if len(parts) == 2 and parts[0] == "apis" and parts[1] in groups:
        return {"kind": "APIGroup", "apiVersion": "v1", **group_doc(parts[1])}
    if (parts[:1] == ["api"] and len(parts) == 2) or (parts[:1] == ["apis"] and len(parts) == 3):
        group, version = ("", parts[1]) if parts[0] == "api" else (parts[1], parts[2])
        served = [d for d in defs if (d.group, d.version) == (group, version)]
        verbs = ["create", "delete", "deletecollection", "get", "list", "patch", "update", "watch"]
        resources: list[Obj] = []
        for d in served:
            entry = {"name": d.plural, "singularName": d.kind.lower(), "namespaced": d.namespaced}
            resources.append({**entry, "kind": d.kind, "verbs": verbs, "shortNames": list(d.short_names)})
            if d.status_subresource:
                resources.append(
                    {
                        **entry,
                        "name": f"{d.plural}/status",
                        "kind": d.kind,
                        "verbs": ["get", "patch", "update"],
                    }
                )
        if not served and group:
            return None
        return {
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": f"{group}/{version}" if group else version,
            "resources": resources,
        }
    return None
