"""The errors the client and the fixture raise."""

from __future__ import annotations

from typing import Any, List, Optional


class TriggersLabError(Exception):
    """Anything the package raises on purpose."""


class ControlError(TriggersLabError):
    """The control API refused a request.

    ``message`` is the API's text; ``problems`` lists a refused release's problems (each a dict
    with ``code``, ``message`` and, when known, ``node`` and ``service``), and is empty otherwise.
    """

    def __init__(self, op: str, message: str, problems: Optional[List[dict]] = None):
        self.op = op
        self.message = message
        self.problems: List[dict] = list(problems or [])
        super().__init__(f"{op}: {message}")

    @classmethod
    def from_reply(cls, op: str, error: Any) -> "ControlError":
        if isinstance(error, dict):
            return cls(op, str(error.get("message", error)), error.get("problems") or [])
        return cls(op, str(error))


class NoEmulator(TriggersLabError):
    """No running ``triggers-lab up`` matches what was asked for (or it did not start)."""


class WaitTimeout(TriggersLabError, TimeoutError):
    """A wait ran out of time; the message says what was waited for and what was seen last."""
