"""The control API's types, generated from docs/control-schema.json by
python/gen_types.py: do not edit (python/tests/test_schema.py checks it is current).
"""

# fmt: off
from typing import Any, Dict, List, Literal, NotRequired, Optional, Tuple, TypedDict, Union

AdvanceReply = Union[Dict[str, Any], 'ErrorReply']

# `advance`: how far to move the virtual clock.
AdvanceRequest = TypedDict('AdvanceRequest', {
    'duration_ms': int,
})

# What an `advance` did.
Advanced = TypedDict('Advanced', {
    'clock': 'GoTime',
    'fired': List['FiredTimer'],
})

CancelReply = Union[Dict[str, Any], 'ErrorReply']

# `cancel`: the run to cancel.
CancelRequest = TypedDict('CancelRequest', {
    'run_id': str,
})

# What cancelling a run dropped: the nodes it waited on (with how many arrivals each) and the timers that were armed.
Cancelled = TypedDict('Cancelled', {
    'pending': Dict[str, int],
    'run_id': str,
    'timers': List[str],
})

CheckReleaseReply = Union[Dict[str, Any], 'ErrorReply']

# `check_release`: the flow to check.
CheckReleaseRequest = TypedDict('CheckReleaseRequest', {
    'flow': 'Flow',
})

ClockMode = Literal['virtual', 'real']

DeployReply = Union[Dict[str, Any], 'ErrorReply']

# `deploy`: the flow to release.
DeployRequest = TypedDict('DeployRequest', {
    'flow': 'Flow',
})

# A released flow (owners assigned, inbound subjects resolved, version set) and the subject it was broadcast on.
Deployment = TypedDict('Deployment', {
    'broadcast_subject': str,
    'flow': 'Flow',
})

ErrorBody = Union[str, 'ReleaseRefusal']

# A refused request's reply: `{"ok": false, "error": …}`.
ErrorReply = TypedDict('ErrorReply', {
    'error': 'ErrorBody',
    'ok': Literal[False],
})

# A timer that fired during an `advance`.
FiredTimer = TypedDict('FiredTimer', {
    'due': 'GoTime',
    'node_id': str,
    'occurrence': int,
    'run_id': str,
})

# A flow: its id, version (set by the release), nodes and edges; docs/flows.md describes them.
Flow = TypedDict('Flow', {
    'edges': NotRequired[List[Dict[str, Any]]],
    'id': str,
    'nodes': NotRequired[List[Dict[str, Any]]],
    'version': NotRequired[int],
})

FlowListReply = Union[Dict[str, Any], 'ErrorReply']

# `flow_list`: no fields (any body is ignored).
FlowListRequest = TypedDict('FlowListRequest', {})

FlowReply = Union[Dict[str, Any], 'ErrorReply']

# `flow`: the deployed flow to read.
FlowRequest = TypedDict('FlowRequest', {
    'flow_id': str,
})

# A deployed flow at a glance (`flow_list`).
FlowSummary = TypedDict('FlowSummary', {
    'edges': int,
    'id': str,
    'nodes': int,
    'services': List[str],
    'version': int,
})

# Where the records are published, and for how long (`follow`).
FollowLease = TypedDict('FollowLease', {
    'lease_ms': int,
    'subject': str,
})

FollowReply = Union[Dict[str, Any], 'ErrorReply']

# Asks for the records to be published for a lease.
FollowRequest = TypedDict('FollowRequest', {
    'lease_ms': NotRequired[Optional[int]],
})

GoTime = str

Liveness = Literal['registered', 'live', 'late', 'down', 'shutting_down']

# One recorded thing: `seq`, `at`, `clock`, `kind` and the kind's fields; docs/emulator.md, "The recorder", lists the kinds.
Record = TypedDict('Record', {
    'at': 'GoTime',
    'clock': 'GoTime',
    'headers': NotRequired[List[List[str]]],
    'kind': str,
    'payload': NotRequired[str],
    'seq': int,
    'subject': NotRequired[str],
})

RecordsReply = Union[Dict[str, Any], 'ErrorReply']

# `records`: the records after `since`, at most `limit`.
RecordsRequest = TypedDict('RecordsRequest', {
    'limit': NotRequired[int],
    'since': NotRequired[int],
})

# One reason a release is refused: a stable code, the node and service concerned when there are, and what to do.
ReleaseProblem = TypedDict('ReleaseProblem', {
    'code': Literal['invalid_flow', 'unknown_service', 'unknown_action', 'no_nats_source', 'unsupported_node', 'unknown_lookup', 'service_in_target_unknown', 'durable_timer_capability_missing', 'durable_timer_transport_not_nats', 'durable_timer_target_missing', 'durable_timer_target_mismatch', 'invalid_id', 'flow_too_large', 'timer_resume_invalid', 'timer_out_of_range', 'locked_target', 'too_many_executions'],
    'message': str,
    'node': NotRequired[str],
    'service': NotRequired[str],
})

# Why a release was refused.
ReleaseRefusal = TypedDict('ReleaseRefusal', {
    'message': str,
    'problems': List['ReleaseProblem'],
})

Request = Union['StateRequest', 'DeployRequest', 'CheckReleaseRequest', 'TriggerRequest', 'ResendDlqRequest', 'AdvanceRequest', 'CancelRequest', 'RunsRequest', Dict[str, Any], 'RunRequest', 'FlowRequest', 'FlowListRequest', 'RecordsRequest', 'ViolationsRequest', 'ServicesRequest']

ResendDlqReply = Union[Dict[str, Any], 'ErrorReply']

# `resend_dlq`: the DLQ entry to re-send.
ResendDlqRequest = TypedDict('ResendDlqRequest', {
    'msg_id': str,
})

# A DLQ entry sent again: its run, the subject, the new idempotency key, the nodes the run waits on again.
Resent = TypedDict('Resent', {
    'idempotency_key': str,
    'nodes': List[str],
    'run_id': str,
    'subject': str,
})

# A run and its progress; docs/emulator.md, "Runs and their statuses", describes its timeline entries and timers.
Run = TypedDict('Run', {
    'completed': List[str],
    'dlq': List[int],
    'failed': List[str],
    'flow_id': str,
    'flow_version': int,
    'id': str,
    'pending': Dict[str, int],
    'settled_at': NotRequired['GoTime'],
    'started_at': 'GoTime',
    'status': 'RunStatus',
    'timeline': List[Dict[str, Any]],
    'timeline_dropped': NotRequired[int],
    'timers': List[Dict[str, Any]],
    'trace_id': str,
    'unexpected': NotRequired[List[str]],
})

# One page of the runs, in start order (`run_page`).
RunPage = TypedDict('RunPage', {
    'more': bool,
    'next': int,
    'runs': List['RunSummary'],
    'total': int,
})

RunPageReply = Union[Dict[str, Any], 'ErrorReply']

# A page of the runs' summaries.
RunPageRequest = TypedDict('RunPageRequest', {
    'after': NotRequired[int],
    'limit': NotRequired[Optional[int]],
})

RunReply = Union[Dict[str, Any], 'ErrorReply']

# `run`: the run, and with either timeline key, which page of its timeline.
RunRequest = TypedDict('RunRequest', {
    'run_id': str,
    'timeline_from': NotRequired[Optional[int]],
    'timeline_limit': NotRequired[Optional[int]],
})

# The run a `trigger` started.
RunStarted = TypedDict('RunStarted', {
    'run_id': str,
})

RunStatus = Literal['running', 'waiting', 'succeeded', 'failed', 'cancelled']

# A run in the state summary.
RunSummary = TypedDict('RunSummary', {
    'failed': List[str],
    'flow_id': str,
    'id': str,
    'settled_at': NotRequired[Union['GoTime', None]],
    'started_at': 'GoTime',
    'status': 'RunStatus',
    'steps': int,
})

# A run (`run`): whole, or with one page of its timeline when the request named `timeline_from` or `timeline_limit`: the entries from `timeline_from`, of `timeline_total`.
RunTimelinePage = TypedDict('RunTimelinePage', {
    'completed': List[str],
    'dlq': List[int],
    'failed': List[str],
    'flow_id': str,
    'flow_version': int,
    'id': str,
    'pending': Dict[str, int],
    'settled_at': NotRequired['GoTime'],
    'started_at': 'GoTime',
    'status': 'RunStatus',
    'timeline': List[Dict[str, Any]],
    'timeline_dropped': NotRequired[int],
    'timeline_from': NotRequired[Optional[int]],
    'timeline_total': NotRequired[Optional[int]],
    'timers': List[Dict[str, Any]],
    'trace_id': str,
    'unexpected': NotRequired[List[str]],
})

RunsReply = Union[Dict[str, Any], 'ErrorReply']

# `runs`: no fields (any body is ignored).
RunsRequest = TypedDict('RunsRequest', {})

# A registered service: its whole manifest (docs/protocol.md) and what the emulator saw of it.
ServiceState = TypedDict('ServiceState', {
    'heartbeats': int,
    'last_heartbeat': NotRequired[Dict[str, Any]],
    'last_seen': NotRequired['GoTime'],
    'manifest': Dict[str, Any],
    'registered_at': 'GoTime',
    'registrations': int,
    'replicas': Dict[str, 'GoTime'],
})

# A service in the state summary.
ServiceSummary = TypedDict('ServiceSummary', {
    'action_count': NotRequired[int],
    'actions': List[str],
    'capabilities': List[str],
    'last_seen': NotRequired[Union['GoTime', None]],
    'liveness': 'Liveness',
    'manifest_hash': str,
    'name': str,
    'replicas': int,
    'version': str,
})

ServicesReply = Union[Dict[str, Any], 'ErrorReply']

# `services`: a page of them by name (a body that cannot be read asks for all).
ServicesRequest = TypedDict('ServicesRequest', {
    'after': NotRequired[Optional[str]],
    'limit': NotRequired[Optional[int]],
})

Severity = Literal['error', 'warning']

StateReply = Union[Dict[str, Any], 'ErrorReply']

# `state`: any body is taken (older clients sent anything); only a `runs_limit` it holds counts.
StateRequest = TypedDict('StateRequest', {
    'runs_limit': NotRequired[Optional[int]],
})

# Everything a viewer needs at a glance (`state`).
StateSummary = TypedDict('StateSummary', {
    'clock': 'GoTime',
    'clock_mode': 'ClockMode',
    'connection_losses': NotRequired[int],
    'cut_in_replies': NotRequired[int],
    'dropped_messages': NotRequired[int],
    'dropped_records': int,
    'dropped_violations': NotRequired[int],
    'evicted_runs': NotRequired[int],
    'flows': List['Flow'],
    'flows_total': NotRequired[int],
    'last_seq': int,
    'runs': List['RunSummary'],
    'runs_total': NotRequired[int],
    'services': List['ServiceSummary'],
    'services_total': NotRequired[int],
    'streams_lost': NotRequired[int],
    'trimmed_violations': NotRequired[int],
    'unfollowed_runs': NotRequired[int],
    'violations': int,
})

TriggerReply = Union[Dict[str, Any], 'ErrorReply']

# `trigger`: the flow to start a run of, and its payload (one of `payload`, `payload_json`, `payload_raw`; `payload_raw` first, then `payload_json`).
TriggerRequest = TypedDict('TriggerRequest', {
    'entry': NotRequired[Optional[str]],
    'flow_id': str,
    'payload': NotRequired[Any],
    'payload_json': NotRequired[Optional[str]],
    'payload_raw': NotRequired[Optional[str]],
})

# A conformance violation as the control API sends it (`violations`).
ViolationReport = TypedDict('ViolationReport', {
    'headers': List[Tuple[str, str]],
    'message': str,
    'payload': str,
    'rule': str,
    'severity': 'Severity',
    'subject': str,
})

ViolationsReply = Union[Dict[str, Any], 'ErrorReply']

# `violations`: a page of them (a body that cannot be read asks for all).
ViolationsRequest = TypedDict('ViolationsRequest', {
    'after': NotRequired[Optional[int]],
    'limit': NotRequired[Optional[int]],
})

#: Every op of the control API and the type of its request.
OPS: Dict[str, Any] = {
    'state': StateRequest,
    'deploy': DeployRequest,
    'check_release': CheckReleaseRequest,
    'trigger': TriggerRequest,
    'resend_dlq': ResendDlqRequest,
    'advance': AdvanceRequest,
    'cancel': CancelRequest,
    'runs': RunsRequest,
    'run_page': RunPageRequest,
    'run': RunRequest,
    'flow': FlowRequest,
    'flow_list': FlowListRequest,
    'records': RecordsRequest,
    'violations': ViolationsRequest,
    'services': ServicesRequest,
    'follow': FollowRequest,
}

#: Every op and the type of its reply's `result`.
RESULTS: Dict[str, Any] = {
    'state': StateSummary,
    'deploy': Deployment,
    'check_release': Flow,
    'trigger': RunStarted,
    'resend_dlq': Resent,
    'advance': Advanced,
    'cancel': Cancelled,
    'runs': List[Run],
    'run_page': RunPage,
    'run': RunTimelinePage,
    'flow': Flow,
    'flow_list': List[FlowSummary],
    'records': List[Record],
    'violations': List[ViolationReport],
    'services': Dict[str, ServiceState],
    'follow': FollowLease,
}
