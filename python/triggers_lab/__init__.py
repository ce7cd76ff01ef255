"""Test services of the triggers platform from Python (docs/python.md).

- ``Lab``: a ``triggers-lab up`` of one's own, and what a test does on it; the pytest fixture
  ``triggers_lab`` (``triggers_lab.pytest_plugin``) hands each test one.
- ``ControlClient`` / ``AsyncControlClient``: the control API of a running ``up``, found by its
  discovery entry (``Discovery``).
"""

from .client import (
    AsyncControlClient,
    ControlClient,
    Discovery,
    duration_ms,
    format_timeline,
)
from .errors import ControlError, NoEmulator, TriggersLabError, WaitTimeout
from ._find import find_triggers_lab
from .lab import Lab, Process

__all__ = [
    "AsyncControlClient",
    "ControlClient",
    "ControlError",
    "Discovery",
    "Lab",
    "NoEmulator",
    "Process",
    "TriggersLabError",
    "WaitTimeout",
    "duration_ms",
    "find_triggers_lab",
    "format_timeline",
]
