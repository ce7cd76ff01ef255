"""Flow-body expressions (docs/flows.md "Expressions" and "Conditions"): paths, mappings, conditions."""

from __future__ import annotations

import re


class ExprError(Exception):
    pass


_NAME = re.compile(r"[^.\[\]]+")


def parse_path(path: str) -> list:
    """`$`, `$.a.b`, `$.items[0].id`, `$["odd key"]`, `$['odd key']` -> list of keys/indexes."""
    if not path.startswith("$"):
        raise ExprError(f"path {path!r} does not start with $")
    steps: list = []
    i, n = 1, len(path)
    while i < n:
        c = path[i]
        if c == ".":
            m = _NAME.match(path, i + 1)
            if not m:
                raise ExprError(f"malformed path {path!r} at {i}")
            steps.append(m.group(0))
            i = m.end()
        elif c == "[":
            if i + 1 < n and path[i + 1] in "\"'":
                q = path[i + 1]
                j = path.find(q, i + 2)
                if j < 0 or j + 1 >= n or path[j + 1] != "]":
                    raise ExprError(f"malformed path {path!r} at {i}")
                steps.append(path[i + 2 : j])
                i = j + 2
            else:
                j = path.find("]", i + 1)
                if j < 0:
                    raise ExprError(f"malformed path {path!r} at {i}")
                idx = path[i + 1 : j]
                if not idx.isdigit() or not idx.isascii():
                    raise ExprError(f"malformed index {idx!r} in {path!r}")
                steps.append(int(idx))
                i = j + 1
        else:
            raise ExprError(f"malformed path {path!r} at {i}")
    return steps


def resolve(path: str, value):
    for step in parse_path(path):
        if isinstance(step, int):
            if isinstance(value, list) and step < len(value):
                value = value[step]
            else:
                return None
        else:
            if isinstance(value, dict) and step in value:
                value = value[step]
            else:
                return None
    return value


def evaluate(expr, value):
    if isinstance(expr, str) and expr.startswith("$"):
        return resolve(expr, value)
    if isinstance(expr, dict) and len(expr) == 1 and "const" in expr:
        return expr["const"]
    return expr


def mapping(config, value):
    if not isinstance(config, dict):
        raise ExprError("mapping config is not an object")
    fields = config.get("fields")
    if not isinstance(fields, dict):
        raise ExprError("mapping has no fields object")
    out = {k: evaluate(e, value) for k, e in fields.items()}
    if config.get("merge") is True and isinstance(value, dict):
        # over an input that is not an object, merge has no effect (docs/flows.md)
        merged = dict(value)
        merged.update(out)
        return merged
    return out


def _is_num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def json_eq(a, b) -> bool:
    """eq/ne/in: two numbers compare as numbers (1 equals 1.0); anything else structurally, where
    nested numbers are equal only when both are integers or both are not (docs/flows.md)."""
    if _is_num(a) and _is_num(b):
        return a == b
    return _same(a, b)


def _same(a, b) -> bool:
    if _is_num(a) and _is_num(b):
        return isinstance(a, int) == isinstance(b, int) and a == b
    if _is_num(a) or _is_num(b):
        return False
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def truthy(v) -> bool:
    if v is None or v is False:
        return False
    if _is_num(v):
        return v != 0
    if isinstance(v, (str, list, dict)):
        return len(v) > 0
    return True


def condition(config, value) -> bool:
    if not isinstance(config, dict):
        raise ExprError("condition config is not an object")
    path = config.get("path", "$")
    if not isinstance(path, str):
        raise ExprError("condition path is not a string")
    op = config.get("op")
    v = resolve(path, value)
    if op in ("exists", "not_exists"):
        return (v is not None) == (op == "exists")
    if op in ("truthy", "falsy"):
        return truthy(v) == (op == "truthy")
    if op not in ("eq", "ne", "gt", "gte", "lt", "lte", "in"):
        raise ExprError(f"unknown op {op!r}")
    if "value" not in config:
        raise ExprError(f"op {op} without value")
    want = config["value"]
    if op == "eq":
        return json_eq(v, want)
    if op == "ne":
        return not json_eq(v, want)
    if op == "in":
        if not isinstance(want, list):
            return False  # not an error (docs/flows.md)
        return any(json_eq(v, x) for x in want)
    if _is_num(v) and _is_num(want):
        a, b = v, want
    elif isinstance(v, str) and isinstance(want, str):
        a, b = v.encode("utf-8", "surrogatepass"), want.encode("utf-8", "surrogatepass")
    else:
        return False
    return {"gt": a > b, "gte": a >= b, "lt": a < b, "lte": a <= b}[op]
