"""What the emulated API server knows about each resource, and how it validates objects.

Agent Sandbox kinds are read from their CustomResourceDefinitions (every served version). Their
``openAPIV3Schema`` is turned into JSON Schema the way the API server reads a structural schema:
``x-kubernetes-int-or-string`` is int-or-string, ``nullable`` allows null, other ``x-kubernetes-*``
keys are ignored. Like the API server, unknown fields are pruned (or rejected with
``field_validation="Strict"``), ``default`` values are filled in, then the object is validated.
ServiceAccount and NetworkPolicy are validated with ``kubernetes-validate`` (the upstream OpenAPI);
GKE's FQDNNetworkPolicy has no public schema, so only its documented shape is checked.
"""

from __future__ import annotations

import copy
import os
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from harness_run.vocab import k8s

__all__ = ["Cause", "ResourceDef", "default_crds_dir", "load_resources"]

Obj = dict[str, Any]

# Kubernetes' own validation of names and label keys/values (apimachinery/pkg/util/validation).
_DNS1123_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


@dataclass(frozen=True, slots=True)
class Cause:
    """One validation problem, as in a Status ``details.causes`` entry."""

    reason: str  # FieldValueRequired, FieldValueInvalid, FieldValueNotSupported, FieldValueTypeInvalid
    field: str  # e.g. "spec.podTemplate.spec.containers[0].image"
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}" if self.field else self.message


Validate = Callable[[Obj], list[Cause]]
Prune = Callable[[Obj], list[str]]


@dataclass(slots=True)
class ResourceDef:
    group: str
    version: str
    plural: str
    kind: str
    short_names: tuple[str, ...] = ()
    namespaced: bool = True
    status_subresource: bool = False
    custom: bool = True  # a custom resource (no strategic merge patch)
    validate: Validate = field(default=lambda _obj: [])
    prune: Prune = field(default=lambda _obj: [])
    apply_defaults: Callable[[Obj], None] = field(default=lambda _obj: None)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


def default_crds_dir() -> Path:
    """``$HARNESS_RUN_CRDS_DIR``, else ``../shared/crds/agent-sandbox`` next to the repository."""
    env = os.environ.get("HARNESS_RUN_CRDS_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[3].parent / "shared" / "crds" / "agent-sandbox"


# ---------------------------------------------------------------------------------------------
# structural schema -> JSON Schema, pruning, defaulting
# ---------------------------------------------------------------------------------------------


def _to_json_schema(schema: Any) -> Any:
    if isinstance(schema, list):
        return [_to_json_schema(item) for item in cast(list[Any], schema)]
    if not isinstance(schema, dict):
        return schema
    src = cast(dict[str, Any], schema)
    out: dict[str, Any] = {
        k: _to_json_schema(v) for k, v in src.items() if not k.startswith("x-kubernetes-") and k != "nullable"
    }
    out.pop("format", None)  # int32/int64/date-time/...: the API server checks few of them; we none
    if src.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out.setdefault("anyOf", [{"type": "integer"}, {"type": "string"}])
    if src.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"]
    return out


def _prune(obj: Any, schema: Mapping[str, Any], path: str, found: list[str]) -> None:
    """Drop fields the structural schema does not know (in place); record their paths."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return
    if isinstance(obj, dict):
        props = cast(Mapping[str, Any], schema.get("properties") or {})
        extra = schema.get("additionalProperties")
        items = cast(dict[str, Any], obj)
        for key in list(items):
            sub = f"{path}.{key}" if path else key
            if key in props:
                _prune(items[key], props[key], sub, found)
            elif isinstance(extra, dict):
                _prune(items[key], cast(Mapping[str, Any], extra), sub, found)
            elif props or extra is False:
                if path == "" and key in ("apiVersion", "kind", "metadata"):
                    continue
                found.append(sub)
                del items[key]
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(cast(list[Any], obj)):
            _prune(item, cast(Mapping[str, Any], schema["items"]), f"{path}[{i}]", found)


def _apply_defaults(obj: Any, schema: Mapping[str, Any]) -> None:
    if isinstance(obj, dict):
        items = cast(dict[str, Any], obj)
        for key, sub in cast(Mapping[str, Any], schema.get("properties") or {}).items():
            if key not in items and isinstance(sub, dict) and "default" in sub:
                items[key] = copy.deepcopy(cast(dict[str, Any], sub)["default"])
            if key in items:
                _apply_defaults(items[key], cast(Mapping[str, Any], sub))
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for value in items.values():
                _apply_defaults(value, cast(Mapping[str, Any], extra))
    elif isinstance(obj, list) and isinstance(schema.get("items"), dict):
        for item in cast(list[Any], obj):
            _apply_defaults(item, cast(Mapping[str, Any], schema["items"]))


def field_path(parts: Iterable[str | int]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out


def _causes_from_jsonschema(errors: Iterable[Any]) -> list[Cause]:
    causes: list[Cause] = []
    for error in errors:
        parts = list(error.absolute_path)
        where = field_path(parts)
        if error.validator == "required":
            instance = error.instance if isinstance(error.instance, dict) else {}
            for name in error.validator_value:
                if name not in instance:
                    causes.append(Cause("FieldValueRequired", field_path([*parts, name]), "Required value"))
        elif error.validator == "enum":
            allowed = ", ".join(f'"{v}"' for v in error.validator_value)
            causes.append(
                Cause(
                    "FieldValueNotSupported",
                    where,
                    f"Unsupported value: {error.instance!r}: supported values: {allowed}",
                )
            )
        elif error.validator in ("type", "anyOf"):
            causes.append(Cause("FieldValueTypeInvalid", where, f"Invalid value: {error.message}"))
        else:
            causes.append(Cause("FieldValueInvalid", where, f"Invalid value: {error.message}"))
    causes.sort(key=lambda c: c.field)
    return causes


def _crd_resources(crd: Mapping[str, Any]) -> list[ResourceDef]:
    import jsonschema

    spec = crd["spec"]
    names = spec["names"]
    out: list[ResourceDef] = []
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        structural = cast(dict[str, Any], version["schema"]["openAPIV3Schema"])
        validator = jsonschema.Draft7Validator(_to_json_schema(structural))

        def validate(obj: Obj, _v: Any = validator) -> list[Cause]:
            return _causes_from_jsonschema(_v.iter_errors(obj))

        def prune(obj: Obj, _s: Mapping[str, Any] = structural) -> list[str]:
            found: list[str] = []
            _prune(obj, _s, "", found)
            return found

        def defaults(obj: Obj, _s: Mapping[str, Any] = structural) -> None:
            _apply_defaults(obj, _s)

        out.append(
            ResourceDef(
                group=spec["group"],
                version=version["name"],
                plural=names["plural"],
                kind=names["kind"],
                namespaced=spec.get("scope", "Namespaced") == "Namespaced",
                status_subresource="status" in (version.get("subresources") or {}),
                short_names=tuple(names.get("shortNames") or ()),
                validate=validate,
                prune=prune,
                apply_defaults=defaults,
            )
        )
    return out


def _validate_core(obj: Obj) -> list[Cause]:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(copy.deepcopy(obj), kubernetes_validate.latest_version(), strict=True)
    except kubernetes_validate.ValidationError as exc:
        error = cast(Any, exc)
        parts = list(getattr(error, "absolute_path", None) or getattr(error, "path", None) or [])
        message = str(getattr(error, "message", exc)).splitlines()[0]
        return [Cause("FieldValueInvalid", field_path(parts), f"Invalid value: {message}")]
    return []


def _validate_fqdn_policy(obj: Obj) -> list[Cause]:
    """GKE FQDNNetworkPolicy: no public schema; check the documented shape."""
    causes: list[Cause] = []
    spec = obj.get("spec")
    if not isinstance(spec, dict):
        return [Cause("FieldValueRequired", "spec", "Required value")]
    spec = cast(dict[str, Any], spec)
    for key in spec:
        if key not in ("podSelector", "egress", "ingress"):
            causes.append(Cause("FieldValueInvalid", f"spec.{key}", "Invalid value: unknown field"))
    rules = spec.get("egress") or []
    if not isinstance(rules, list):
        return [*causes, Cause("FieldValueTypeInvalid", "spec.egress", "Invalid value: must be a list")]
    for i, rule in enumerate(cast(list[Any], rules)):
        where = f"spec.egress[{i}]"
        if not isinstance(rule, dict):
            causes.append(Cause("FieldValueTypeInvalid", where, "Invalid value: must be an object"))
            continue
        rule = cast(dict[str, Any], rule)
        for j, match in enumerate(rule.get("matches") or []):
            if not (isinstance(match, dict) and len(cast(dict[str, Any], match)) == 1):
                causes.append(Cause("FieldValueInvalid", f"{where}.matches[{j}]", "Invalid value"))
            elif next(iter(cast(dict[str, Any], match))) not in ("name", "pattern"):
                causes.append(
                    Cause("FieldValueInvalid", f"{where}.matches[{j}]", "Invalid value: name or pattern")
                )
        for j, port in enumerate(rule.get("ports") or []):
            number = port.get("port") if isinstance(port, dict) else None
            if not (isinstance(number, int) and 0 < number < 65536):
                causes.append(Cause("FieldValueInvalid", f"{where}.ports[{j}].port", "Invalid value"))
    return causes


def validate_metadata(obj: Obj, *, namespaced: bool) -> list[Cause]:
    """The checks the API server makes on every object's metadata."""
    causes: list[Cause] = []
    meta = obj.get("metadata")
    if not isinstance(meta, dict):
        return [Cause("FieldValueRequired", "metadata", "Required value")]
    meta = cast(dict[str, Any], meta)
    name = meta.get("name")
    if not isinstance(name, str) or not name:
        causes.append(Cause("FieldValueRequired", "metadata.name", "Required value: name or generateName"))
    elif len(name) > 253 or not _DNS1123_SUBDOMAIN.match(name):
        causes.append(
            Cause(
                "FieldValueInvalid",
                "metadata.name",
                f"Invalid value: {name!r}: a lowercase RFC 1123 subdomain must consist of lower case "
                "alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character",
            )
        )
    for kind in ("labels", "annotations"):
        values = meta.get(kind)
        if values is None:
            continue
        if not isinstance(values, dict):
            causes.append(Cause("FieldValueTypeInvalid", f"metadata.{kind}", "Invalid value: must be a map"))
            continue
        for key, value in cast(dict[str, Any], values).items():
            where = f"metadata.{kind}"
            prefix, _, short = key.rpartition("/")
            key_ok = (
                bool(short)
                and len(short) <= 63
                and bool(_QUALIFIED_NAME.match(short))
                and (not prefix or (len(prefix) <= 253 and bool(_DNS1123_SUBDOMAIN.match(prefix))))
            )
            if not key_ok:
                causes.append(Cause("FieldValueInvalid", where, f"Invalid value: {key!r}: invalid key"))
            if not isinstance(value, str):
                causes.append(
                    Cause(
                        "FieldValueTypeInvalid", f"{where}[{key}]", f"Invalid value: {value!r}: not a string"
                    )
                )
            elif kind == "labels" and (len(value) > 63 or not _LABEL_VALUE.match(value)):
                causes.append(
                    Cause("FieldValueInvalid", f"{where}[{key}]", f"Invalid value: {value!r}: invalid label")
                )
    return causes


def _core_resources() -> list[ResourceDef]:
    sa, np, fqdn = k8s.SERVICE_ACCOUNT, k8s.NETWORK_POLICY, k8s.FQDN_NETWORK_POLICY
    return [
        ResourceDef(sa.group, sa.version, sa.plural, sa.kind, ("sa",), custom=False, validate=_validate_core),
        ResourceDef(
            np.group, np.version, np.plural, np.kind, ("netpol",), custom=False, validate=_validate_core
        ),
        ResourceDef(fqdn.group, fqdn.version, fqdn.plural, fqdn.kind, validate=_validate_fqdn_policy),
    ]


def load_resources(crds_dir: Path, extra_crds: Sequence[Mapping[str, Any]] = ()) -> list[ResourceDef]:
    """Every resource the emulator serves: the Agent Sandbox CRDs in ``crds_dir`` plus core kinds."""
    import yaml

    from harness_run.errors import UsageError

    paths = sorted(crds_dir.glob("*.yaml")) if crds_dir.is_dir() else []
    if not paths:
        raise UsageError(
            f"no Agent Sandbox CRDs (*.yaml) found in {crds_dir}; set HARNESS_RUN_CRDS_DIR to the folder "
            "holding agents.x-k8s.io_sandboxes.yaml and the extensions.agents.x-k8s.io_*.yaml files"
        )
    key = tuple((str(p), p.stat().st_mtime_ns) for p in paths)
    if key not in _CACHE:
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        crds: list[Mapping[str, Any]] = [yaml.load(p.read_text(), Loader=loader) for p in paths]
        _CACHE[key] = [res for crd in crds for res in _crd_resources(crd)]
    extra = [res for crd in extra_crds for res in _crd_resources(crd)]
    return [*_CACHE[key], *extra, *_core_resources()]


# CRD files -> their resources (the schemas take ~1 s to load; every emulator of a process shares them).
_CACHE: dict[tuple[tuple[str, int], ...], list[ResourceDef]] = {}
