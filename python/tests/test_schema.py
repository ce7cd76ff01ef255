"""The Python types are the control protocol's JSON Schema (docs/control-schema.json):
triggers_lab/_schema.py is what python/gen_types.py makes of it today, every op it defines has a
method on the client, and every type it names resolves; so the two cannot drift."""

import importlib.util
import json
import sys
import typing
from pathlib import Path

import pytest

from triggers_lab import AsyncControlClient

PYTHON = Path(__file__).resolve().parents[1]
SCHEMA = PYTHON.parent / "docs" / "control-schema.json"

pytestmark = pytest.mark.skipif(
    not SCHEMA.exists(), reason="docs/control-schema.json is not in this checkout"
)


def generator():
    spec = importlib.util.spec_from_file_location("gen_types", PYTHON / "gen_types.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_types_are_generated_from_the_schema_as_it_is():
    import triggers_lab._schema as generated

    fresh = generator().generate(json.loads(SCHEMA.read_text()))
    assert Path(generated.__file__).read_text() == fresh, (
        "triggers_lab/_schema.py is behind docs/control-schema.json: run "
        "python python/gen_types.py > python/triggers_lab/_schema.py"
    )


def test_every_op_of_the_schema_has_a_method():
    from triggers_lab._schema import OPS, RESULTS

    assert sorted(OPS) == sorted(RESULTS)
    missing = [op for op in OPS if not callable(getattr(AsyncControlClient, op, None))]
    assert missing == [], f"ops of the schema without a method on the client: {missing}"


def test_every_type_resolves():
    import triggers_lab._schema as generated

    for name in dir(generated):
        obj = getattr(generated, name)
        if isinstance(obj, type) and hasattr(obj, "__required_keys__"):
            typing.get_type_hints(obj)  # raises on a name the schema does not define


def test_each_method_returns_the_schemas_result_type():
    from triggers_lab._schema import RESULTS, Run

    # Where the client gives more than the op's reply: trigger's run id alone, and run's whole
    # timeline (read a page at a time) in place of one page.
    made_by_the_client = {"trigger": str, "run": Run}
    for op, result in RESULTS.items():
        hints = typing.get_type_hints(getattr(AsyncControlClient, op))
        assert hints["return"] == made_by_the_client.get(op, result), op
