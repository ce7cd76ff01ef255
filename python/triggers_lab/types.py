"""The control API's shapes as Python types (docs/emulator.md, "The control API").

Every op the API serves is in ``OPS``, with the shape of its request; the tests check this list
against the ops of the control protocol's JSON Schema (docs/control-schema.json) so that the two
cannot drift.
"""

from __future__ import annotations

from typing import Any, Dict, List, NotRequired, Optional, TypedDict


class Problem(TypedDict):
    """One problem of a refused release: a stable snake_case ``code`` and a message."""

    code: str
    message: str
    node: NotRequired[str]
    service: NotRequired[str]


class TimelineEntry(TypedDict, total=False):
    seq: int
    node_id: str
    node_type: str
    service: str
    status: str
    retries: int
    started_at: str
    finished_at: str
    error: str


class Run(TypedDict, total=False):
    """A run as the ``run`` op returns it."""

    id: str
    flow_id: str
    flow_version: int
    status: str
    trace_id: str
    started_at: str
    settled_at: Optional[str]
    timeline: List[TimelineEntry]
    completed: List[str]
    pending: List[Any]
    failed: List[str]
    timers: List[Any]
    dlq: List[int]


class Violation(TypedDict, total=False):
    severity: str
    rule: str
    subject: str
    message: str
    headers: List[Any]
    payload: str


class DlqRecord(TypedDict, total=False):
    """A record of kind ``dlq``: the entry as JetStream stored it."""

    seq: int
    at: str
    clock: str
    subject: str
    headers: List[Any]
    payload: str
    kind: str
    msg_id: str
    entry: Dict[str, Any]


class Fired(TypedDict):
    run_id: str
    node_id: str
    occurrence: int
    due: str


# The requests, op by op.


class StateRequest(TypedDict, total=False):
    runs_limit: int


class FlowRequest(TypedDict):
    flow: Dict[str, Any]


class TriggerRequest(TypedDict):
    flow_id: str
    payload: NotRequired[Any]
    entry: NotRequired[str]
    payload_json: NotRequired[str]


class ResendDlqRequest(TypedDict):
    msg_id: str


class AdvanceRequest(TypedDict):
    duration_ms: int


class RunIdRequest(TypedDict):
    run_id: str


class RunRequest(TypedDict):
    run_id: str
    timeline_from: NotRequired[int]
    timeline_limit: NotRequired[int]


class RunPageRequest(TypedDict, total=False):
    after: int
    limit: int


class FlowIdRequest(TypedDict):
    flow_id: str


class EmptyRequest(TypedDict):
    pass


class RecordsRequest(TypedDict, total=False):
    since: int
    limit: int


class PageRequest(TypedDict, total=False):
    after: int
    limit: int


class ServicesRequest(TypedDict, total=False):
    after: str
    limit: int


class FollowRequest(TypedDict, total=False):
    lease_ms: int


#: Every op of the control API, with its request's type.
OPS: Dict[str, type] = {
    "state": StateRequest,
    "deploy": FlowRequest,
    "check_release": FlowRequest,
    "trigger": TriggerRequest,
    "resend_dlq": ResendDlqRequest,
    "advance": AdvanceRequest,
    "cancel": RunIdRequest,
    "runs": EmptyRequest,
    "run_page": RunPageRequest,
    "run": RunRequest,
    "flow": FlowIdRequest,
    "flow_list": EmptyRequest,
    "records": RecordsRequest,
    "violations": PageRequest,
    "services": ServicesRequest,
    "follow": FollowRequest,
}
