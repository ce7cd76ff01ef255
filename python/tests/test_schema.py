"""The Python types cover the control protocol's JSON Schema (docs/control-schema.json): every
op it defines has a method on the client and a request type here whose fields are the schema's,
so the two cannot drift."""

import json
from pathlib import Path

import pytest

from triggers_lab import AsyncControlClient
from triggers_lab.types import OPS

SCHEMA = Path(__file__).resolve().parents[2] / "docs" / "control-schema.json"

pytestmark = pytest.mark.skipif(
    not SCHEMA.exists(), reason="docs/control-schema.json is not in this checkout"
)


def schema():
    return json.loads(SCHEMA.read_text())


def resolve(node, defs):
    while isinstance(node, dict) and "$ref" in node:
        node = defs[node["$ref"].rsplit("/", 1)[-1]]
    return node


def variants(request, defs):
    """The schema's request variants: each an object whose `op` is a constant."""
    request = resolve(request, defs)
    for key in ("oneOf", "anyOf"):
        if key in request:
            for v in request[key]:
                yield from variants(v, defs)
            return
    if "allOf" in request:
        merged = {"properties": {}}
        for part in request["allOf"]:
            part = resolve(part, defs)
            merged["properties"].update(part.get("properties", {}))
        request = merged
    yield request


def schema_ops():
    defs = schema()["$defs"]
    ops = {}
    for v in variants(defs["Request"], defs):
        op = resolve(v.get("properties", {}).get("op", {}), defs)
        name = op.get("const") or (op.get("enum") or [None])[0]
        assert name, f"a request variant without a constant op: {v}"
        ops[name] = set(v.get("properties", {})) - {"op"}
    return ops


def test_every_op_of_the_schema_is_typed_and_has_a_method():
    ops = schema_ops()
    assert sorted(ops) == sorted(OPS)
    for op in ops:
        assert callable(getattr(AsyncControlClient, op, None)), f"no method for op {op}"


def test_each_request_type_has_the_schemas_fields():
    for op, fields in schema_ops().items():
        typed = set(OPS[op].__annotations__)
        assert typed == fields, f"op {op}: the schema has {sorted(fields)}, types.py {sorted(typed)}"


def test_each_op_has_a_reply_in_the_schema():
    defs = schema()["$defs"]
    for op in OPS:
        name = "".join(w.capitalize() for w in op.split("_")) + "Reply"
        assert name in defs, f"no {name} in the schema"
