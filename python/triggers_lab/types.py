"""The control API's shapes as Python types: those of its JSON Schema (docs/control-schema.json),
generated into ``_schema.py`` by python/gen_types.py, plus the names the client uses for a few.

``OPS`` maps every op to its request's type, ``RESULTS`` to the type of its reply's ``result``.
python/tests/test_schema.py regenerates ``_schema.py`` and compares, so they cannot drift.
"""

from ._schema import *  # noqa: F401,F403 (every definition of the schema)
from ._schema import OPS, RESULTS, FiredTimer, Record, ReleaseProblem, Run, ViolationReport

#: A conformance violation (``violations``).
Violation = ViolationReport
#: A record of kind ``dlq`` (``records``): ``subject``, ``msg_id``, ``entry``.
DlqRecord = Record
#: A problem of a refused release: ``code``, ``message``, ``node``, ``service``.
Problem = ReleaseProblem
#: A timer ``advance`` fired.
Fired = FiredTimer

