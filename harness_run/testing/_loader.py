"""Scripts from YAML/JSON files, with the same vocabulary as the Python API.

A file holds a list of entries (or a mapping with a ``script:`` list). Each entry is one reply, a
``rules:`` block, or a bare string (a text reply)::

    - text: "I'll create the file."
      shell: "echo hi > out.txt"          # several part keys = several parts, in this order
      usage: {input_tokens: 100, output_tokens: 20}
      delay: 0.2
      thinking: "The user wants a file."
    - write_file: {path: a.py, content: "print(1)\\n"}
    - tool_call: {name: Read, input: {file_path: /etc/hostname}}
    - structured: {answer: 42}
    - parts: [{shell: "ls"}, {shell: "pwd"}]  # repeated kinds
    - error: {status: 500, message: boom}   # or error: 500; optional sibling sticky: false
    - drop: true                            # or drop: "partial text"; optional sticky: false
    - done                                  # = text: done
    - rules:
        - match: "hello"                    # substring of the last user text
          contains: "secret"                # substring of any message text (optional)
          tool_result: false                # false (default) | true | null
          times: 1                          # optional
          reply: {text: "hi there"}

Every problem raises :class:`harness_run.errors.UsageError` naming the file, the entry
(``script[2].write_file.content``) and what is expected.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn, cast

from harness_run.errors import UsageError
from harness_run.testing._replies import Reply, Usage, combine
from harness_run.testing._script import Rule, ScriptItem

__all__ = ["load_script", "parse_script"]

_PART_KEYS = ("text", "shell", "write_file", "tool_call", "structured")
_OPTION_KEYS = ("delay", "usage", "thinking", "stop_reason")
_RULE_KEYS = {"match", "contains", "tool_result", "times", "reply"}


class _Ctx:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, where: str, message: str) -> NoReturn:
        raise UsageError(f"{self.source}: {where}: {message}")


def load_script(path: str | Path) -> list[ScriptItem]:
    """Read a script file (``.json``, or YAML for any other suffix) into replies and rules."""
    file = Path(path)
    try:
        raw = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read script file {file}: {exc.strerror or exc}") from exc
    if file.suffix.lower() == ".json":
        try:
            data = json.loads(raw)
        except ValueError as exc:
            raise UsageError(f"{file}: not valid JSON: {exc}") from exc
    else:
        import yaml

        try:
            data = yaml.safe_load(raw)
        except yaml.YAMLError as exc:
            raise UsageError(f"{file}: not valid YAML: {exc}") from exc
    return parse_script(data, source=str(file))


def parse_script(data: Any, *, source: str = "<script>") -> list[ScriptItem]:
    """Turn already-parsed YAML/JSON data into script items (see the module docstring)."""
    ctx = _Ctx(source)
    if data is None:
        return []
    if isinstance(data, Mapping):
        mapping = cast(Mapping[str, Any], data)
        unknown = sorted(set(mapping) - {"script"})
        if unknown:
            ctx.fail("top level", f"unknown key(s) {unknown}; expected a list of entries or 'script:'")
        data = mapping.get("script") or []
    if not isinstance(data, list):
        ctx.fail("top level", f"expected a list of entries, got {type(data).__name__}")
    items: list[ScriptItem] = []
    for index, entry in enumerate(cast(list[Any], data)):
        where = f"script[{index}]"
        if isinstance(entry, Mapping) and "rules" in entry:
            items.extend(_rules(ctx, where, cast(Mapping[str, Any], entry)))
        else:
            items.append(_reply(ctx, where, entry))
    return items


def _rules(ctx: _Ctx, where: str, entry: Mapping[str, Any]) -> list[Rule]:
    if set(entry) != {"rules"}:
        ctx.fail(where, f"a 'rules' entry cannot have other keys, found {sorted(set(entry) - {'rules'})}")
    rules = entry["rules"]
    if not isinstance(rules, list):
        ctx.fail(f"{where}.rules", "expected a list of rules")
    out: list[Rule] = []
    for i, rule in enumerate(cast(list[Any], rules)):
        at = f"{where}.rules[{i}]"
        if not isinstance(rule, Mapping):
            ctx.fail(
                at, "expected a mapping with 'reply' and conditions (match, contains, tool_result, times)"
            )
        r = cast(Mapping[str, Any], rule)
        unknown = sorted(set(r) - _RULE_KEYS)
        if unknown:
            ctx.fail(at, f"unknown key(s) {unknown}; expected some of {sorted(_RULE_KEYS)}")
        if "reply" not in r:
            ctx.fail(f"{at}.reply", "missing: every rule needs a reply")
        for key in ("match", "contains"):
            if r.get(key) is not None and not isinstance(r[key], str):
                ctx.fail(f"{at}.{key}", f"expected a string, got {type(r[key]).__name__}")
        tool_result = r.get("tool_result", False)
        if tool_result is not None and not isinstance(tool_result, bool):
            ctx.fail(f"{at}.tool_result", "expected true, false or null")
        times = r.get("times")
        if times is not None and (not isinstance(times, int) or isinstance(times, bool) or times < 1):
            ctx.fail(f"{at}.times", f"expected a positive integer, got {times!r}")
        out.append(
            Rule(
                match=r.get("match"),
                reply=_reply(ctx, f"{at}.reply", r["reply"]),
                contains=r.get("contains"),
                tool_result=tool_result,
                times=times,
            )
        )
    return out


def _reply(ctx: _Ctx, where: str, entry: Any) -> Reply:
    if isinstance(entry, str):
        return Reply.text(entry)
    if not isinstance(entry, Mapping):
        ctx.fail(
            where, f"expected a mapping (text, shell, write_file, …) or a string, got {type(entry).__name__}"
        )
    e = cast(Mapping[str, Any], entry)
    known = {*_PART_KEYS, *_OPTION_KEYS, "parts", "error", "drop", "sticky"}
    unknown = sorted(set(e) - known)
    if unknown:
        ctx.fail(where, f"unknown key(s) {unknown}; expected some of {sorted(known)}")
    if "error" in e:
        return _error(ctx, where, e)
    if "drop" in e:
        return _drop(ctx, where, e)
    pieces = [_part(ctx, f"{where}.{key}", key, e[key]) for key in e if key in _PART_KEYS]
    if "parts" in e:
        if not isinstance(e["parts"], list):
            ctx.fail(f"{where}.parts", "expected a list of single-part mappings")
        for i, sub in enumerate(cast(list[Any], e["parts"])):
            at = f"{where}.parts[{i}]"
            if not isinstance(sub, Mapping) or len(cast(Mapping[str, Any], sub)) != 1:
                ctx.fail(at, f"expected a mapping with exactly one of {list(_PART_KEYS)}")
            key, value = next(iter(cast(Mapping[str, Any], sub).items()))
            if key not in _PART_KEYS:
                ctx.fail(at, f"unknown part {key!r}; expected one of {list(_PART_KEYS)}")
            pieces.append(_part(ctx, f"{at}.{key}", key, value))
    if not pieces:
        ctx.fail(where, f"no reply part: give one of {list(_PART_KEYS)}, 'parts', 'error' or 'drop'")
    return _options(ctx, where, e, combine(*pieces))


def _part(ctx: _Ctx, where: str, key: str, value: Any) -> Reply:
    if key == "text" or key == "shell":
        if not isinstance(value, str):
            ctx.fail(where, f"expected a string, got {type(value).__name__}")
        return Reply.text(value) if key == "text" else Reply.shell(value)
    if key == "structured":
        return Reply.structured(value)
    if not isinstance(value, Mapping):
        ctx.fail(where, "expected a mapping")
    v = cast(Mapping[str, Any], value)
    if key == "write_file":
        _check_keys(ctx, where, v, required=("path", "content"))
        for field in ("path", "content"):
            if not isinstance(v[field], str):
                ctx.fail(f"{where}.{field}", f"expected a string, got {type(v[field]).__name__}")
        return Reply.write_file(v["path"], v["content"])
    _check_keys(ctx, where, v, required=("name",), optional=("input",))
    if not isinstance(v["name"], str) or not v["name"]:
        ctx.fail(f"{where}.name", "expected a non-empty string")
    tool_input: object = v.get("input") or {}
    if not isinstance(tool_input, Mapping):
        ctx.fail(f"{where}.input", "expected a mapping of tool arguments")
    return Reply.tool_call(v["name"], cast(Mapping[str, Any], tool_input))


def _check_keys(
    ctx: _Ctx, where: str, v: Mapping[str, Any], *, required: tuple[str, ...], optional: tuple[str, ...] = ()
) -> None:
    for field in required:
        if field not in v:
            ctx.fail(f"{where}.{field}", "missing")
    unknown = sorted(set(v) - {*required, *optional})
    if unknown:
        ctx.fail(where, f"unknown key(s) {unknown}; expected {[*required, *optional]}")


def _error(ctx: _Ctx, where: str, e: Mapping[str, Any]) -> Reply:
    extra = sorted(set(e) - {"error", "delay", "sticky"})
    if extra:
        ctx.fail(where, f"'error' cannot be combined with {extra}")
    spec = e["error"]
    if isinstance(spec, int) and not isinstance(spec, bool):
        spec = {"status": spec}
    if not isinstance(spec, Mapping):
        ctx.fail(f"{where}.error", "expected a status number or {status, message, type}")
    s = cast(Mapping[str, Any], spec)
    _check_keys(ctx, f"{where}.error", s, required=("status",), optional=("message", "type"))
    status = s["status"]
    if not isinstance(status, int) or isinstance(status, bool) or not 400 <= status <= 599:
        ctx.fail(f"{where}.error.status", f"expected an HTTP error status 400-599, got {status!r}")
    message = s.get("message", "scripted error")
    if not isinstance(message, str):
        ctx.fail(f"{where}.error.message", "expected a string")
    return Reply.error(
        status, message, type=s.get("type"), delay=_delay(ctx, where, e), sticky=_sticky(ctx, where, e)
    )


def _drop(ctx: _Ctx, where: str, e: Mapping[str, Any]) -> Reply:
    extra = sorted(set(e) - {"drop", "delay", "sticky"})
    if extra:
        ctx.fail(where, f"'drop' cannot be combined with {extra}")
    value = e["drop"]
    if value is True or isinstance(value, str):
        partial = value if isinstance(value, str) else ""
        return Reply.drop(partial, delay=_delay(ctx, where, e), sticky=_sticky(ctx, where, e))
    return ctx.fail(f"{where}.drop", "expected true or a partial text string")


def _sticky(ctx: _Ctx, where: str, e: Mapping[str, Any]) -> bool:
    sticky = e.get("sticky", True)
    if not isinstance(sticky, bool):
        ctx.fail(f"{where}.sticky", f"expected true or false, got {sticky!r}")
    return sticky


def _delay(ctx: _Ctx, where: str, e: Mapping[str, Any]) -> float:
    delay = e.get("delay", 0)
    if not isinstance(delay, int | float) or isinstance(delay, bool) or delay < 0:
        ctx.fail(f"{where}.delay", f"expected a number of seconds >= 0, got {delay!r}")
    return float(delay)


def _options(ctx: _Ctx, where: str, e: Mapping[str, Any], reply: Reply) -> Reply:
    thinking = e.get("thinking")
    if thinking is not None and not isinstance(thinking, str):
        ctx.fail(f"{where}.thinking", "expected a string")
    stop_reason = e.get("stop_reason")
    if stop_reason is not None and not isinstance(stop_reason, str):
        ctx.fail(f"{where}.stop_reason", "expected a string")
    usage = e.get("usage")
    if usage is not None and not isinstance(usage, Mapping):
        ctx.fail(f"{where}.usage", "expected a mapping like {input_tokens: 10, output_tokens: 5}")
    delay = _delay(ctx, where, e)
    try:
        coerced = Usage.coerce(cast(Mapping[str, int], usage)) if usage is not None else None
    except ValueError as exc:
        ctx.fail(f"{where}.usage", str(exc))
    return reply.with_options(thinking=thinking, usage=coerced, delay=delay, stop_reason=stop_reason)
