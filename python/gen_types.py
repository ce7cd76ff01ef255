"""Writes triggers_lab/_schema.py, the control API's types, from its JSON Schema.

    python python/gen_types.py [docs/control-schema.json] > python/triggers_lab/_schema.py

Every object of the schema's ``$defs`` becomes a ``TypedDict`` (its required fields plain, the
others ``NotRequired``), every string enum a ``Literal``; ``OPS`` maps each op of ``Request`` to its
request type and ``RESULTS`` to the type of its reply's ``result``. python/tests/test_schema.py
generates it again and compares, so the file cannot fall behind the schema.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional

DEFAULT = Path(__file__).resolve().parents[1] / "docs" / "control-schema.json"


def ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def literal_values(node: Dict[str, Any]) -> Optional[List[Any]]:
    """The constants of a string enum (``enum``, or ``oneOf`` of ``const``), else None."""
    if "enum" in node and all(isinstance(v, str) for v in node["enum"]):
        return list(node["enum"])
    variants = node.get("oneOf") or node.get("anyOf")
    if variants and all(isinstance(v, dict) and "const" in v for v in variants):
        return [v["const"] for v in variants]
    return None


def type_of(node: Any) -> str:
    """A Python annotation for a schema node (names of other definitions quoted)."""
    if not isinstance(node, dict) or not node:
        return "Any"
    if "$ref" in node:
        return f"'{ref_name(node['$ref'])}'"
    if "const" in node:
        return f"Literal[{node['const']!r}]"
    values = literal_values(node)
    if values is not None:
        return f"Literal[{', '.join(repr(v) for v in values)}]"
    for key in ("oneOf", "anyOf"):
        if key in node:
            parts = [type_of(v) for v in node[key]]
            if "Any" in parts:
                return "Any"
            unique = list(dict.fromkeys(parts))
            return unique[0] if len(unique) == 1 else f"Union[{', '.join(unique)}]"
    t = node.get("type")
    if isinstance(t, list):
        inner = [x for x in t if x != "null"]
        base = type_of({**node, "type": inner[0]}) if len(inner) == 1 else "Any"
        return f"Optional[{base}]" if "null" in t else base
    if t == "string":
        return "str"
    if t == "integer":
        return "int"
    if t == "number":
        return "float"
    if t == "boolean":
        return "bool"
    if t == "null":
        return "None"
    if t == "array":
        if "prefixItems" in node:
            return f"Tuple[{', '.join(type_of(i) for i in node['prefixItems'])}]"
        return f"List[{type_of(node.get('items'))}]"
    if t == "object":
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            return f"Dict[str, {type_of(extra)}]"
        return "Dict[str, Any]"
    return "Any"


def first_line(text: str) -> str:
    return " ".join(text.split("\n\n", 1)[0].split())


def typed_dict(name: str, node: Dict[str, Any]) -> str:
    props: Dict[str, Any] = node.get("properties", {})
    required = set(node.get("required", []))
    lines = []
    if node.get("description"):
        lines.append(f"# {first_line(node['description'])}")
    if not props:
        lines.append(f"{name} = TypedDict({name!r}, {{}})")
        return "\n".join(lines)
    fields = []
    for field in sorted(props):
        t = type_of(props[field])
        fields.append(f"    {field!r}: {t if field in required else f'NotRequired[{t}]'},")
    lines.append(f"{name} = TypedDict({name!r}, {{")
    lines.extend(fields)
    lines.append("})")
    return "\n".join(lines)


def request_ops(defs: Dict[str, Any]) -> Dict[str, str]:
    """op -> the name of its request type, from ``Request``'s variants: the definition a variant
    refers to, else ``<Op>Request`` made from the variant's own fields (``op`` left out), added to
    ``defs``."""
    ops = {}
    for variant in defs["Request"].get("oneOf", []):
        op = variant.get("properties", {}).get("op", {}).get("const")
        if op is None:
            raise SystemExit(f"a Request variant without a constant op: {variant}")
        if "$ref" in variant:
            ops[op] = ref_name(variant["$ref"])
            continue
        name = f"{pascal(op)}Request"
        if name not in defs:
            own = {k: v for k, v in variant.get("properties", {}).items() if k != "op"}
            defs[name] = {
                "description": variant.get("description", f"`{op}`."),
                "properties": own,
                "required": [r for r in variant.get("required", []) if r != "op"],
                "type": "object",
            }
        ops[op] = name
    return ops


def pascal(op: str) -> str:
    return "".join(w[:1].upper() + w[1:] for w in op.split("_"))


def result_type(defs: Dict[str, Any], op: str) -> str:
    reply = defs.get(f"{pascal(op)}Reply")
    if reply is None:
        raise SystemExit(f"no {pascal(op)}Reply in the schema for op {op}")
    for variant in reply.get("oneOf", []):
        result = variant.get("properties", {}).get("result")
        if result is not None:
            return type_of(result)
    raise SystemExit(f"{pascal(op)}Reply has no variant with a result")


def generate(schema: Dict[str, Any]) -> str:
    defs: Dict[str, Any] = schema["$defs"]
    out = [
        '"""The control API\'s types, generated from docs/control-schema.json by',
        "python/gen_types.py: do not edit (python/tests/test_schema.py checks it is current).",
        '"""',
        "",
        "# fmt: off",
        "from typing import Any, Dict, List, Literal, NotRequired, Optional, Tuple, TypedDict, Union",
        "",
    ]
    ops = request_ops(defs)
    for name in sorted(defs):
        node = defs[name]
        values = literal_values(node)
        if "properties" in node or node.get("type") == "object" and literal_values(node) is None and "oneOf" not in node:
            out.append(typed_dict(name, node))
        elif values is not None:
            out.append(f"{name} = Literal[{', '.join(repr(v) for v in values)}]")
        else:
            out.append(f"{name} = {type_of(node).strip(chr(39))}")
        out.append("")
    out.append("#: Every op of the control API and the type of its request.")
    out.append("OPS: Dict[str, Any] = {")
    out.extend(f"    {op!r}: {ops[op]}," for op in ops)
    out.append("}")
    out.append("")
    out.append("#: Every op and the type of its reply's `result`.")
    out.append("RESULTS: Dict[str, Any] = {")
    # Every definition exists by here: the names are written unquoted.
    out.extend(f"    {op!r}: {result_type(defs, op).replace(chr(39), '')}," for op in ops)
    out.append("}")
    out.append("")
    return "\n".join(out)


def main() -> None:
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT
    sys.stdout.write(generate(json.loads(path.read_text())))


if __name__ == "__main__":
    main()
