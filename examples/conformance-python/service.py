#!/usr/bin/env python3
"""The triggers-lab conformance service, in Python on nats-py.

Written from docs/protocol.md, docs/flows.md, docs/wire.md and docs/conform.md alone (no SDK):
see README.md next to this file. ``CONFORM_BREAK=<check>`` makes it get one behaviour wrong.
``CONFORM_VARIANT=allowed`` makes it do, wherever the documents leave a choice, the other thing
they allow (see ALLOWED below): it must still score 100 %.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
import secrets
import signal
import sys
import time
import urllib.request
from collections import OrderedDict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import nats  # noqa: E402
import nats.errors  # noqa: E402
import nats.js.errors  # noqa: E402
from nats.js import api  # noqa: E402

import flowexpr  # noqa: E402
from gowire import (  # noqa: E402
    GO_ZERO_TIME,
    RawJSON,
    Struct,
    decode,
    encode,
    go_time_ns,
    manifest_hash,
    parse_time,
)

log = logging.getLogger("conformance")

SERVICE = os.environ.get("TRIGGERS_SERVICE") or "conformance"
VERSION = "1.0.0"
PROTOCOL = "1.0.0"
INBOUND = f"{SERVICE}.inbound"  # conformance.inbound; another name is handy as a hop peer in manual tests
BREAK = os.environ.get("CONFORM_BREAK", "")
# What the documents allow but this service does not do by default, done instead: actions and
# supports_nodes in another order, no in-progress acks (the kit's actions are short), a longer
# wait for a flow's broadcast, times at a +02:00 offset, exit status 143 after SIGTERM. A kit
# that failed it would fail a correct SDK (docs/conform.md, "No false failures").
ALLOWED = os.environ.get("CONFORM_VARIANT", "") == "allowed"

if ALLOWED:
    _go_time_utc = go_time_ns

    def go_time_ns(ns: int) -> str:  # noqa: F811
        """The instant as the wall clock at +02:00 reads it: another offset is kept (wire.md)."""
        return _go_time_utc(ns + 7_200_000_000_000)[:-1] + "+02:00"

CAPABILITIES = ["durable_timer.v1"]
DURABLE_TIMER = "durable_timer.v1" in CAPABILITIES
MAX_DELIVER = 5
CONCURRENCY = 16

def _ack_wait_s() -> float:
    """The consumer's ack_wait: TRIGGERS_ACK_WAIT_MS when set (the kit sets it short, so a lost ack
    redelivers fast; docs/conform.md), else 30 s (protocol.md section 4)."""
    raw = os.environ.get("TRIGGERS_ACK_WAIT_MS", "")
    try:
        ms = int(raw) if raw else 30_000
    except ValueError:
        raise SystemExit(f"TRIGGERS_ACK_WAIT_MS={raw!r} is not a whole number of milliseconds")
    if not 1_000 <= ms <= 86_400_000:
        raise SystemExit(f"TRIGGERS_ACK_WAIT_MS={raw!r}: give 1000 to 86400000 (1 s to 1 day)")
    return ms / 1000


ACK_WAIT_S = _ack_wait_s()
MAX_FLOWS = 10_000
HANDLED_KEYS = 10_000
UNKNOWN_FLOW_WAIT = 3.0 if ALLOWED else 2.0  # at least 2 s (protocol.md section 5)
HOP_STREAM_WAIT = 3.0

FALLBACK_KINDS = {
    "invalid_json",
    "missing_envelope",
    "invalid_envelope",
    "unknown_flow",
    "unknown_node",
    "node_failed",
    "delivery_exhausted",
}

# -------------------------------------------------------------------------------------------
# envelope

H_TRACE = "X-Triggers-Trace-Id"
H_SPAN = "X-Triggers-Span-Id"
H_TRACEPARENT = "X-Triggers-Traceparent"
H_RUN = "X-Triggers-Flow-Run-Id"
H_FLOW = "X-Triggers-Flow-Id"
H_VERSION = "X-Triggers-Flow-Version"
H_KEY = "X-Triggers-Idempotency-Key"
H_SOURCE = "X-Triggers-Source-Node-Id"
H_RETRY = "X-Triggers-Retry-Count"
H_EMITTED = "X-Triggers-Emitted-At"
H_MSG_ID = "Nats-Msg-Id"
ENVELOPE_HEADERS = [H_TRACE, H_SPAN, H_TRACEPARENT, H_RUN, H_FLOW, H_VERSION, H_KEY, H_SOURCE, H_RETRY, H_EMITTED]
H_DT_CONTEXT = "X-Triggers-Durable-Timer-Context"
H_DT_EXEC = "X-Triggers-Execution-Id"
H_DT_SHA = "X-Triggers-Durable-Timer-Payload-SHA256"
TRIPLET = [H_DT_CONTEXT, H_DT_EXEC, H_DT_SHA]
TRIPLET_LOWER = {n.lower() for n in TRIPLET}

_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX16 = re.compile(r"^[0-9a-f]{16}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_COUNT = re.compile(r"^(0|[1-9][0-9]*)$")
_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$")


def traceparent_ok(tp: str) -> bool:
    m = _TRACEPARENT.match(tp)
    if not m:
        return False
    ver, trace, span, _flags, rest = m.groups()
    if ver == "ff" or trace == "0" * 32 or span == "0" * 16:
        return False
    if ver == "00" and rest:
        return False
    return True


class Envelope:
    FIELDS = [
        "trace_id", "span_id", "traceparent", "flow_run_id", "flow_id", "flow_version",
        "idempotency_key", "source_node_id", "retry_count", "emitted_at",
    ]

    def __init__(self, **kw):
        self.trace_id = kw.get("trace_id", "")
        self.span_id = kw.get("span_id", "")
        self.traceparent = kw.get("traceparent", "")
        self.flow_run_id = kw.get("flow_run_id", "")
        self.flow_id = kw.get("flow_id", "")
        self.flow_version = kw.get("flow_version", 0)
        self.idempotency_key = kw.get("idempotency_key", "")
        self.source_node_id = kw.get("source_node_id", "")
        self.retry_count = kw.get("retry_count", 0)
        self.emitted_at = kw.get("emitted_at", GO_ZERO_TIME)

    def copy(self, **kw) -> "Envelope":
        d = {f: getattr(self, f) for f in self.FIELDS}
        d.update(kw)
        return Envelope(**d)

    def to_json(self) -> Struct:
        return Struct((f, getattr(self, f)) for f in self.FIELDS)

    def headers(self) -> dict:
        h = {}
        if self.trace_id:
            h[H_TRACE] = self.trace_id
        if self.span_id:
            h[H_SPAN] = self.span_id
        if self.traceparent:
            h[H_TRACEPARENT] = self.traceparent
        h[H_RUN] = self.flow_run_id
        h[H_FLOW] = self.flow_id
        h[H_VERSION] = str(self.flow_version)
        h[H_KEY] = self.idempotency_key
        h[H_SOURCE] = self.source_node_id
        h[H_RETRY] = str(self.retry_count)
        h[H_EMITTED] = self.emitted_at
        h[H_MSG_ID] = self.idempotency_key
        return h


class EnvelopeError(Exception):
    def __init__(self, kind: str, msg: str, partial: Envelope):
        super().__init__(msg)
        self.kind = kind
        self.partial = partial


def lower_headers(msg) -> dict:
    return {k.lower(): v for k, v in (msg.headers or {}).items()}


def read_envelope(h: dict) -> Envelope:
    """Read the envelope from headers (already lower-cased); raise EnvelopeError."""
    present = [name for name in ENVELOPE_HEADERS if name.lower() in h]
    env = Envelope()
    problems = []

    def get(name):
        return h.get(name.lower())

    # tracing: a malformed value is dropped (the trace restarts), never refused
    t = get(H_TRACE)
    if t and _HEX32.match(t):
        env.trace_id = t
    s = get(H_SPAN)
    if s and _HEX16.match(s):
        env.span_id = s
    tp = get(H_TRACEPARENT)
    if tp and not traceparent_ok(tp) and BREAK == "traceparent_invalid":
        problems.append(f"{H_TRACEPARENT} {tp!r} is not W3C")  # broken: it must be ignored
    if tp and traceparent_ok(tp):
        env.traceparent = tp
        if not env.trace_id:
            env.trace_id = tp.split("-")[1]
    for name, attr in [(H_RUN, "flow_run_id"), (H_FLOW, "flow_id"), (H_KEY, "idempotency_key"), (H_SOURCE, "source_node_id")]:
        v = get(name)
        if v:
            setattr(env, attr, v)
        else:
            problems.append(f"{name} missing")
    v = get(H_VERSION)
    if v is None or v == "":
        problems.append(f"{H_VERSION} missing")
    elif _COUNT.match(v) and int(v) < 2**63:
        env.flow_version = int(v)
    else:
        problems.append(f"{H_VERSION} {v!r} is not a canonical non-negative decimal")
    v = get(H_RETRY)
    if v is not None:
        if _COUNT.match(v) and int(v) < 2**63:
            env.retry_count = int(v)
        else:
            problems.append(f"{H_RETRY} {v!r} is not a canonical non-negative decimal")
    v = get(H_EMITTED)
    if v is not None:
        try:
            env.emitted_at = parse_time(v).text()
        except ValueError as e:
            problems.append(f"{H_EMITTED}: {e}")
    if not present:
        raise EnvelopeError("missing_envelope", "no envelope header", env)
    if problems:
        raise EnvelopeError("invalid_envelope", "; ".join(problems), env)
    return env


def now_ns() -> int:
    return time.time_ns()


def new_span() -> str:
    return secrets.token_hex(8)


def digest(inbound_key: str, trail, target: str) -> str:
    """The 16-hex digest of a hop or output key (docs/wire.md, "The recipes"): SHA-256 over the
    inbound key, each edge of the trail, then `>` and the target service (empty for an output),
    one a line, no trailing newline."""
    text = inbound_key + "".join("\n" + e for e in trail) + "\n>" + target
    if BREAK == "hop_keys" and target:
        # broken: the key ignores the inbound delivery (and the trail): two executions of a node
        # in one run share it, and JetStream's dedup drops the second hand-off
        text = "\n>" + target
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


# -------------------------------------------------------------------------------------------
# the manifest

OBJ = {"type": "object"}


def action(name, input_schema, result_schema, timeout_ms, retry):
    return OrderedDict(
        name=name,
        input_schema=input_schema,
        result_schema=result_schema,
        timeout_ms=timeout_ms,
        retry=OrderedDict(
            max_attempts=retry[0], initial_backoff_ms=retry[1], backoff_factor=float(retry[2]), max_backoff_ms=retry[3]
        ),
        dlq=f"triggers.v2.dlq.{SERVICE}.{name}",
    )


def int_object(field):
    return {"type": "object", "properties": {field: {"type": "integer"}}, "required": [field]}


ACTIONS = [
    action("echo", OBJ, OBJ, 5000, (1, 0, 1, 0)),
    action("flaky", int_object("failures"), int_object("attempts"), 5000, (3, 20, 2, 100)),
    action("slow", int_object("ms"), int_object("slept"), 300, (1, 0, 1, 0)),
    action("crash", OBJ, OBJ, 5000, (1, 0, 1, 0)),
    action(
        "shape",
        {"type": "object", "properties": {"value": {}}, "required": ["value"]},
        {},
        5000,
        (1, 0, 1, 0),
    ),
]
if ALLOWED:
    ACTIONS.reverse()  # the manifest's order is the service's own
ACTIONS_BY_NAME = {a["name"]: a for a in ACTIONS}
SUPPORTS_NODES = ["mapping", "condition", "lookup"] if ALLOWED else ["condition", "lookup", "mapping"]

LOOKUPS = [
    OrderedDict(
        name="directory",
        params=[OrderedDict(name="key", type="string", required=True)],
        result_fields=[
            OrderedDict(name="found", type="boolean", required=True),
            OrderedDict(name="value", type="string"),
        ],
    )
]


def build_manifest() -> Struct:
    m = {
        "actions": ACTIONS,
        "service_sources": [{"name": "inbound", "transport": "nats", "default": INBOUND}],
        "supports_nodes": SUPPORTS_NODES,
        "runtime_capabilities": CAPABILITIES,
        "runtime_lookups": LOOKUPS,
    }
    h = manifest_hash(m)
    if BREAK == "register":
        h = "sha256:" + hashlib.sha256(h.encode()).hexdigest()  # a well-formed, wrong hash

    def field(f):
        out = Struct(name=f["name"], type=f["type"])
        if f.get("required"):
            out["required"] = True
        return out

    return Struct(
        protocol_version=PROTOCOL,
        service=SERVICE,
        service_version=VERSION,
        manifest_hash=h,
        actions=[
            Struct(
                name=a["name"],
                input_schema=a["input_schema"],
                result_schema=a["result_schema"],
                timeout_ms=a["timeout_ms"],
                retry=Struct(a["retry"]),
                dlq=a["dlq"],
            )
            for a in ACTIONS
        ],
        service_sources=[Struct(name="inbound", transport="nats", default=INBOUND)],
        supports_nodes=SUPPORTS_NODES,
        runtime_capabilities=CAPABILITIES,
        runtime_lookups=[
            Struct(
                name=lk["name"],
                params=[field(f) for f in lk["params"]],
                result_fields=[field(f) for f in lk["result_fields"]],
            )
            for lk in LOOKUPS
        ],
    )


# -------------------------------------------------------------------------------------------
# actions and the lookup


class ActionError(Exception):
    def __init__(self, msg: str, retryable: bool = True):
        super().__init__(msg)
        self.retryable = retryable


class InvalidInput(Exception):
    pass


def _int_field(payload, name):
    if not isinstance(payload, dict):
        raise InvalidInput(f"input is not an object: {type(payload).__name__}")
    v = payload.get(name)
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise InvalidInput(f"input field {name!r} is not a non-negative integer")
    return v


async def act_echo(payload, env: Envelope):
    if not isinstance(payload, dict) and BREAK != "dlq_invalid_input":
        raise InvalidInput(f"input is not an object: {type(payload).__name__}")
    return payload


async def act_flaky(payload, env: Envelope):
    n = _int_field(payload, "failures")
    attempt = env.retry_count + 1
    if attempt <= n:
        raise ActionError(f"flaky: attempt {attempt} of {n} planned failures", retryable=True)
    return {"attempts": attempt}


async def act_slow(payload, env: Envelope):
    ms = _int_field(payload, "ms")
    await asyncio.sleep(ms / 1000)
    return {"slept": ms}


async def act_crash(payload, env: Envelope):
    if not isinstance(payload, dict):
        raise InvalidInput(f"input is not an object: {type(payload).__name__}")
    raise RuntimeError("crash: an uncaught exception, as asked")


async def act_shape(payload, env: Envelope):
    if not isinstance(payload, dict) or "value" not in payload:
        raise InvalidInput("input is not an object with a value")
    return payload["value"]


HANDLERS = {"echo": act_echo, "flaky": act_flaky, "slow": act_slow, "crash": act_crash, "shape": act_shape}


def lookup_directory(params):
    key = params.get("key")
    if not isinstance(key, str):
        raise ValueError("directory: param key is not a string")
    if key == "missing":
        return {"found": False}
    prefix = "value-for-" if BREAK == "lookup" else "value-of-"
    return {"found": True, "value": prefix + key}


LOOKUP_FNS = {"directory": lookup_directory}


# -------------------------------------------------------------------------------------------
# flows


class Flow:
    def __init__(self, fid: str, version: int, body: dict):
        if not isinstance(body, dict):
            raise ValueError("body is not an object")
        nodes = body.get("nodes")
        edges = body.get("edges") or []
        if not isinstance(nodes, list) or not isinstance(edges, list):
            raise ValueError("nodes/edges are not arrays")
        self.id = fid
        self.version = version
        self.nodes = {}
        for n in nodes:
            if not isinstance(n, dict) or not isinstance(n.get("id"), str) or not isinstance(n.get("type"), str):
                raise ValueError(f"malformed node {n!r}")
            self.nodes[n["id"]] = n
        self.out = {}
        for e in edges:
            if not isinstance(e, dict) or not all(isinstance(e.get(k), str) for k in ("id", "from", "to")):
                raise ValueError(f"malformed edge {e!r}")
            if e["from"] not in self.nodes or e["to"] not in self.nodes:
                raise ValueError(f"edge {e['id']} names a node the flow lacks")
            self.out.setdefault(e["from"], []).append(e)
        self.has_timer = any(n["type"] == "timer" for n in self.nodes.values())

    def owner(self, node_id):
        return self.nodes[node_id].get("service")


class Flows:
    def __init__(self):
        self.flows = {}  # id -> {version: Flow}, the highest and those below it kept
        self.refused = 0
        self.changed = asyncio.Event()

    def install(self, env) -> None:
        if not isinstance(env, dict):
            raise ValueError("flow envelope is not an object")
        fid, version, body = env.get("id"), env.get("version"), env.get("body")
        if not isinstance(fid, str) or not fid or isinstance(version, bool) or not isinstance(version, int):
            raise ValueError("flow envelope without id or integer version")
        flow = Flow(fid, version, body)
        if flow.has_timer and not DURABLE_TIMER:
            self.refused += 1
            raise ValueError(f"flow {fid} has a timer and {SERVICE} lacks durable_timer.v1")
        held = self.flows.get(fid)
        if held and version < max(held):
            log.info("flow %s v%s ignored: v%s held", fid, version, max(held))
            return
        if held is None and len(self.flows) >= MAX_FLOWS:
            self.refused += 1
            raise ValueError("too many flows held")
        held = self.flows.setdefault(fid, {})
        held[version] = flow
        for v in sorted(held)[:-8]:  # bound the older versions kept for in-flight runs
            del held[v]
        log.info("flow %s v%s installed", fid, version)
        self.changed.set()
        self.changed = asyncio.Event()

    def get(self, fid, version):
        held = self.flows.get(fid)
        if not held or max(held) < version:
            return None
        return held.get(version) or held[max(held)]

    async def wait(self, fid, version, patience):
        deadline = time.monotonic() + patience
        while True:
            f = self.get(fid, version)
            if f is not None:
                return f
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            try:
                await asyncio.wait_for(self.changed.wait(), left)
            except asyncio.TimeoutError:
                pass


# -------------------------------------------------------------------------------------------
# the service


class Fail(Exception):
    """A node that failed for good: dead-letter it (after its failed event)."""

    def __init__(self, kind, subject_tail, msg, body, env, failed_event=None):
        super().__init__(msg)
        self.kind, self.subject_tail, self.body, self.env = kind, subject_tail, body, env
        self.failed_event = failed_event  # the event to publish after the entry (dlq_order break)


class Service:
    def __init__(self, url):
        self.url = url
        self.flows = Flows()
        self.handled = OrderedDict()  # inbound keys handled in full (only the ack may be lost)
        self.kept = OrderedDict()  # (inbound key, node, trail) -> a succeeded action's result
        self.stream_cache = {}
        self.started_at = go_time_ns(now_ns())
        self.stopping = asyncio.Event()
        self.inflight = set()
        self.sem = asyncio.Semaphore(CONCURRENCY)
        self.manifest = build_manifest()
        self.hash = self.manifest["manifest_hash"]

    # -- NATS helpers ---------------------------------------------------------------------

    async def stream_for(self, subject):
        hit = self.stream_cache.get(subject)
        if hit and hit[1] > time.monotonic():
            return hit[0]
        try:
            name = await self.js_mgr.find_stream_name_by_subject(subject)
        except nats.js.errors.NotFoundError:
            name = None
        self.stream_cache[subject] = (name, time.monotonic() + 30)
        return name

    async def publish(self, subject, data: bytes, headers=None):
        """Through JetStream (awaiting the ack) where a stream captures the subject."""
        if await self.stream_for(subject):
            await self.js.publish(subject, data, headers=headers, timeout=5)
        else:
            await self.nc.publish(subject, data, headers=headers)

    async def heartbeat(self, shutting_down=False):
        hb = Struct(
            service=SERVICE,
            service_version="0.9.9" if BREAK == "heartbeat" else VERSION,
            manifest_hash=self.hash,
            # fixed for the life of the replica (broken: it moves)
            started_at=go_time_ns(now_ns()) if BREAK == "heartbeat_interval" else self.started_at,
            now=go_time_ns(now_ns()),
            shutting_down=shutting_down,
        )
        if BREAK == "conformant":
            hb["pid"] = os.getpid()  # a field outside the shape: the checker's unknown_field (error)
        await self.nc.publish("triggers.v2.heartbeat", encode(hb))

    async def heartbeats(self):
        while not self.stopping.is_set():
            try:
                await asyncio.wait_for(self.stopping.wait(), 5)
            except asyncio.TimeoutError:
                try:
                    await self.heartbeat()
                except Exception as e:  # noqa: BLE001
                    log.warning("heartbeat: %s", e)

    async def event(self, env: Envelope, flow: Flow, node_id, status, started, finished, error=""):
        ntype = flow.nodes[node_id]["type"]
        ev = Struct(
            flow_run_id=env.flow_run_id,
            flow_id=env.flow_id,
            # the run's version, never the held flow's newest (protocol.md section 6)
            flow_version=max(self.flows.flows.get(env.flow_id) or {0: None}) if BREAK == "redeploy_mid_run" else env.flow_version,
            node_id=node_id,
            node_type=ntype,
            service=SERVICE,
            started_at=go_time_ns(started),
            finished_at=go_time_ns(finished),
            status=status,
        )
        if error:
            ev["error"] = error
        trace = env.trace_id
        if BREAK == "echo" and node_id == "echo" and status == "succeeded":
            trace = ""
        if trace:
            ev["trace_id"] = trace
        await self.publish(f"triggers.v2.flow.events.{env.flow_id}", encode(ev))

    async def dlq(self, kind, tail, env: Envelope, body, err_msg):
        ns = now_ns()
        entry = Struct(kind=kind, envelope=env.to_json(), body=body, err_msg=err_msg, occurred_at=go_time_ns(ns))
        stamp = ns
        if BREAK == "dlq_action_failed" and kind == "action_failed":
            stamp = ns // 1_000_000
        subject = f"triggers.v2.dlq.{SERVICE}.{tail}"
        await self.publish(subject, encode(entry), headers={H_MSG_ID: f"{env.idempotency_key}:dlq:{stamp}"})
        log.info("DLQ %s on %s: %s", kind, subject, err_msg)

    # -- start ------------------------------------------------------------------------------

    async def on_broadcast(self, msg):
        try:
            self.flows.install(decode(msg.data))
        except Exception as e:  # noqa: BLE001
            log.warning("broadcast on %s ignored: %s", msg.subject, e)

    async def subscribe_broadcasts(self):
        """Both broadcast subjects, plain subscriptions (every replica gets every flow), before the
        registration is sent (protocol.md section 2)."""
        # broken (replicas): a queue group shares the flows out between replicas
        queue = f"{SERVICE}-flows" if BREAK == "replicas" else ""
        await self.nc.subscribe(f"triggers.v2.flow.broadcast.{SERVICE}", queue=queue, cb=self.on_broadcast)
        await self.nc.subscribe("triggers.v2.flow.broadcast.all", queue=queue, cb=self.on_broadcast)
        await self.nc.flush()

    async def start(self):
        # broken (server_restart): no reconnect, so a server restart leaves the service deaf
        reconnect = BREAK != "server_restart"
        self.nc = await nats.connect(self.url, name=SERVICE, max_reconnect_attempts=-1, allow_reconnect=reconnect)
        self.js = self.nc.jetstream()
        self.js_mgr = self.nc.jsm()
        if BREAK != "broadcast_before_reply":
            await self.subscribe_broadcasts()
        stream_override = os.environ.get("TRIGGERS_NATS_SOURCE_STREAM")
        if stream_override:
            await self.ensure_stream(stream_override)
        try:
            reply = await self.nc.request("triggers.v2.manifest.register", encode(self.manifest), timeout=10)
        except (nats.errors.NoRespondersError, nats.errors.TimeoutError) as e:
            raise SystemExit(f"registration: no orchestrator answered on triggers.v2.manifest.register ({e!r})")
        rep = decode(reply.data)
        if not isinstance(rep, dict):
            raise SystemExit(f"registration: reply is not an object: {reply.data[:200]!r}")
        if rep.get("error"):
            raise SystemExit(f"registration refused: {rep['error']}")
        log.info("registered %s %s (%s)", SERVICE, VERSION, self.hash)
        if BREAK == "broadcast_before_reply":
            await self.subscribe_broadcasts()  # broken: a flow broadcast before this is missed
        for f in rep.get("flows") or []:
            try:
                self.flows.install(f)
            except Exception as e:  # noqa: BLE001
                log.warning("flow of the register reply ignored: %s", e)
        stream = await self.pick_stream(stream_override)
        durable = f"triggers-{SERVICE}-" + re.sub(r"[.>* \t/]", "_", INBOUND)
        # 30 s, kept by an in-progress ack every 10 s while a message is handled (retries and
        # backoff included): a delivery lost in transit comes back after it (protocol.md §4).
        ack_wait = ACK_WAIT_S
        config = api.ConsumerConfig(
            durable_name=durable,
            filter_subject=INBOUND,
            ack_policy=api.AckPolicy.EXPLICIT,
            ack_wait=ack_wait,
            max_deliver=-1 if BREAK == "consumer" else MAX_DELIVER,  # broken: unbounded, poison loops
            deliver_policy=api.DeliverPolicy.ALL,
            max_ack_pending=4 * CONCURRENCY,
        )
        try:
            info = await self.js_mgr.consumer_info(stream, durable)
            if info.config.ack_wait != ack_wait:
                # made by an earlier run with another TRIGGERS_ACK_WAIT_MS: update it if the
                # server lets us, else go on with it and say so
                try:
                    await self.js_mgr.add_consumer(stream, config=config)
                except Exception as e:  # noqa: BLE001
                    log.warning("consumer %s keeps ack_wait %ss, not %ss: %s", durable, info.config.ack_wait, ack_wait, e)
        except nats.js.errors.NotFoundError:
            await self.js_mgr.add_consumer(stream, config=config)
        self.psub = await self.js.pull_subscribe_bind(durable=durable, stream=stream)
        await self.heartbeat()

    async def ensure_stream(self, name):
        try:
            await self.js_mgr.stream_info(name)
        except nats.js.errors.NotFoundError:
            await self.js_mgr.add_stream(
                name=name,
                subjects=[INBOUND],
                max_age=7 * 86400,
                max_bytes=1 << 30,
                duplicate_window=120,
            )

    async def pick_stream(self, override):
        if override:
            return override
        name = f"triggers-sources-{SERVICE}"
        try:
            await self.js_mgr.stream_info(name)
            return name
        except nats.js.errors.NotFoundError:
            pass
        found = await self.stream_for(INBOUND)
        if found:
            return found
        await self.ensure_stream(name)
        self.stream_cache.pop(INBOUND, None)
        return name

    # -- the pull loop ----------------------------------------------------------------------

    async def run(self):
        hb = asyncio.create_task(self.heartbeats())
        while not self.stopping.is_set():
            await self.sem.acquire()
            if self.stopping.is_set():
                self.sem.release()
                break
            try:
                msgs = await self.psub.fetch(1, timeout=1)
            except (nats.errors.TimeoutError, asyncio.TimeoutError):
                self.sem.release()
                continue
            except Exception as e:  # noqa: BLE001
                self.sem.release()
                log.warning("fetch: %s", e)
                await asyncio.sleep(0.5)
                continue
            for m in msgs:
                t = asyncio.create_task(self.handle_guarded(m))
                self.inflight.add(t)
                t.add_done_callback(self.inflight.discard)
        # shutdown: pulling stopped; let in-flight work finish within the grace period
        if self.inflight:
            await asyncio.wait(set(self.inflight), timeout=30)
        hb.cancel()
        if BREAK != "shutdown":
            try:
                await asyncio.wait_for(self.heartbeat(shutting_down=True), 2)
            except Exception as e:  # noqa: BLE001
                log.warning("last heartbeat: %s", e)
        # every wait below is bounded: a service whose server is gone still exits
        try:
            await asyncio.wait_for(self.psub.unsubscribe(), 2)  # its queue would hold the drain up
        except Exception:  # noqa: BLE001
            pass
        try:
            await asyncio.wait_for(self.nc.drain(), 5)
        except Exception:  # noqa: BLE001
            try:
                await asyncio.wait_for(self.nc.close(), 2)
            except Exception:  # noqa: BLE001
                pass

    async def handle_guarded(self, msg):
        progress = asyncio.create_task(self.keep_in_progress(msg))
        try:
            if BREAK == "ack_order":
                await msg.ack()  # broken: acked when pulled, before anything is reported
            await self.handle(msg)
            # The ack is the last thing sent for a delivery: events, DLQ entries, hops published
            # through JetStream are acked already; a plain publish (an output nobody streams) is
            # confirmed by a round trip to the server first (protocol.md section 10).
            await self.nc.flush(timeout=5)
            if BREAK != "ack_order":
                await msg.ack()
        except Exception as e:  # noqa: BLE001 - an outcome could not be reported: give it back
            log.warning("message given back: %r", e)
            await self.give_back(msg, e)
        finally:
            progress.cancel()
            self.sem.release()

    async def keep_in_progress(self, msg):
        if ALLOWED:
            return  # none: every action of the kit ends well within ack_wait
        while True:
            await asyncio.sleep(ACK_WAIT_S / 3)
            try:
                await msg.in_progress()
            except Exception:  # noqa: BLE001
                pass

    async def give_back(self, msg, err):
        try:
            delivered = msg.metadata.num_delivered
        except Exception:  # noqa: BLE001
            delivered = 1
        try:
            if delivered >= MAX_DELIVER:
                h = lower_headers(msg)
                try:
                    env = read_envelope(h)
                except EnvelopeError as ee:
                    env = ee.partial
                await self.dlq("delivery_exhausted", "delivery_exhausted", env, body_json(msg.data), f"{err}")
                await msg.ack()
            else:
                await msg.nak(delay=min(2 ** (delivered - 1), 30))
        except Exception:  # noqa: BLE001
            try:
                await msg.term()
            except Exception:  # noqa: BLE001
                pass

    # -- section 5: which nodes to run ------------------------------------------------------

    async def handle(self, msg):
        h = lower_headers(msg)
        data = msg.data or b""
        # 1. the envelope
        try:
            env = read_envelope(h)
        except EnvelopeError as e:
            kind = e.kind
            if BREAK == "dlq_missing_envelope" and kind == "missing_envelope":
                kind = "invalid_envelope"
            elif BREAK == "dlq_invalid_envelope" and kind == "invalid_envelope":
                kind = "missing_envelope"
            await self.dlq(kind, e.kind, e.partial, body_json(data), str(e))
            return
        # 2. the body
        try:
            payload = decode(data)
        except (ValueError, UnicodeDecodeError) as e:
            body = body_json(data)
            if BREAK == "dlq_invalid_json":
                body = "hex:" + data.hex()
            await self.dlq("invalid_json", "invalid_json", env, body, f"payload is not JSON: {e}")
            return
        key = env.idempotency_key
        try:
            redelivered = msg.metadata.num_delivered > 1
        except Exception:  # noqa: BLE001
            redelivered = False
        # broken (ack_lost): a redelivery of a handled delivery runs again; broken
        # (crash_redelivery): every redelivery is taken for one already handled, so a delivery
        # whose handling died with the process is acked unrun
        handled = key in self.handled and BREAK != "ack_lost"
        if redelivered and (handled or BREAK == "crash_redelivery"):
            log.info("%s handled already: acked again", key)
            return
        # 3. the flow
        patience = 0 if BREAK == "unknown_flow_wait" else UNKNOWN_FLOW_WAIT  # broken: no wait
        flow = await self.flows.wait(env.flow_id, env.flow_version, patience)
        if flow is None:
            kind = "unknown_node" if BREAK == "dlq_unknown_flow" else "unknown_flow"
            await self.dlq(kind, "unknown_flow", env, RawJSON(data), f"flow {env.flow_id} v{env.flow_version} is not held")
            return
        # 4. the source node
        src = env.source_node_id
        if src not in flow.nodes:
            kind = "unknown_flow" if BREAK == "dlq_unknown_node" else "unknown_node"
            await self.dlq(kind, "unknown_node", env, RawJSON(data), f"node {src} is not in flow {flow.id} v{flow.version}")
            return
        # 5. what is this service's
        succ = flow.out.get(src, [])
        if succ and all(flow.nodes[e["to"]]["type"] == "timer" for e in succ):
            self.remember(key)
            return
        holder = flow.owner(src) == SERVICE
        own = [e for e in succ if flow.owner(e["to"]) == SERVICE and flow.nodes[e["to"]]["type"] != "timer"]
        if not succ or (not holder and not own):
            await self.dlq("unknown_node", "unknown_node", env, RawJSON(data), f"nothing of {SERVICE} follows {src}")
            return
        # 6. the Durable Timer triplet
        present = [name for name in TRIPLET if name.lower() in h]
        if present:
            problem = check_triplet(h, data) if present else None
            if BREAK == "timer_rejected":
                problem = None
            if problem:
                first = first_action(flow, src, holder)
                if first:
                    await self.dlq("durable_timer_rejected", flow.nodes[first]["action"], env, RawJSON(data), problem)
                else:
                    await self.dlq("invalid_envelope", "invalid_envelope", env, RawJSON(data), problem)
                return
            if BREAK == "timer" and is_elapsed(h):
                log.info("CONFORM_BREAK=timer: elapsed delivery ignored")
                return
        # 7. the nodes
        ctx = Ctx(flow, env, data, {n: msg.headers[n] for n in (msg.headers or {}) if n.lower() in TRIPLET_LOWER})
        if holder:
            await self.hand_on(ctx, src, payload, [], holder=True)
        else:
            await self.hand_on(ctx, src, payload, [], holder=False)
        self.remember(key)

    def remember(self, key):
        self.handled[key] = True
        while len(self.handled) > HANDLED_KEYS:
            self.handled.popitem(last=False)

    # -- sections 6 and 7: running nodes and handing on ------------------------------------

    async def hand_on(self, ctx, node_id, output, trail, holder=True):
        """After `node_id` produced `output`: run own successors here, hop to the others."""
        flow = ctx.flow
        hops = OrderedDict()  # service -> (inbound subject, first node)
        for e in flow.out.get(node_id, []):
            target = flow.nodes[e["to"]]
            if target["type"] == "timer":
                continue
            if flow.owner(e["to"]) == SERVICE:
                await self.run_node(ctx, e["to"], output, trail + [e["id"]])
            elif holder:
                svc = flow.owner(e["to"])
                if svc and svc not in hops:
                    hops[svc] = (target.get("inbound") or (target.get("config") or {}).get("target"), e["to"])
        for svc, (subject, first) in hops.items():
            await self.hop(ctx, node_id, svc, subject, output, trail)

    async def hop(self, ctx, node_id, svc, subject, output, trail):
        env = ctx.env
        key = f"{env.flow_run_id}:{node_id}>{svc}:{digest(env.idempotency_key, trail, svc)}"
        if BREAK == "hop_out":
            key = env.idempotency_key
        span = new_span()
        hop_env = env.copy(
            span_id=span,
            traceparent=f"00-{env.trace_id}-{span}-01" if env.trace_id else "",
            source_node_id=node_id,
            retry_count=0,
            emitted_at=go_time_ns(now_ns()),
            idempotency_key=key,
            # the run's version (the envelope's), never the held flow's newest (protocol.md 7)
            flow_version=max(self.flows.flows.get(env.flow_id) or {0: None}) if BREAK == "redeploy_mid_run" else env.flow_version,
        )
        if BREAK == "hop_traceparent":
            hop_env.traceparent = ""  # broken: the run's trace ends here
        data = encode(output)
        tail = ctx.flow.nodes[node_id]["action"] if ctx.flow.nodes[node_id]["type"] == "action" else "node_failed"
        kind = "routing_failed" if ctx.flow.nodes[node_id]["type"] == "action" else "node_failed"
        if not subject or locked_subject(subject):
            await self.dlq(kind, tail, hop_env, RawJSON(data), f"hop to {svc}: no usable inbound subject {subject!r}")
            return
        deadline = time.monotonic() + HOP_STREAM_WAIT
        last = None
        while True:
            try:
                if BREAK == "hop_jetstream":
                    # broken: a plain publish, no stream's ack awaited
                    await self.nc.publish(subject, data, headers=ctx.onward_headers(hop_env))
                    return
                if await self.stream_for(subject):
                    await self.js.publish(subject, data, headers=ctx.onward_headers(hop_env), timeout=5)
                    log.info("hop %s -> %s (%s) key %s", node_id, svc, subject, key)
                    return
                last = f"no stream captures {subject}"
                self.stream_cache.pop(subject, None)
            except Exception as e:  # noqa: BLE001
                last = repr(e)
            if time.monotonic() >= deadline:
                break
            await asyncio.sleep(0.5)
        await self.dlq(kind, tail, hop_env, RawJSON(data), f"hop to {svc} on {subject}: {last}")

    async def run_node(self, ctx, node_id, payload, trail):
        flow, env = ctx.flow, ctx.env
        node = flow.nodes[node_id]
        ntype = node["type"]
        config = node.get("config") or {}
        started = now_ns()
        try:
            if ntype == "service-in":
                if BREAK != "hop_in":
                    await self.event(env, flow, node_id, "succeeded", started, now_ns())
                out = payload
            elif ntype == "action":
                if BREAK == "handoff_order":
                    # broken: the output is handed on before the action's succeeded event
                    out = await self.run_action(ctx, node_id, payload, trail, report=False)
                    await self.hand_on(ctx, node_id, out, trail)
                    await self.event(env, flow, node_id, "succeeded", started, now_ns())
                    return
                out = await self.run_action(ctx, node_id, payload, trail)
            elif ntype == "mapping":
                out = await self.simple(ctx, node_id, payload, started, lambda: flowexpr.mapping(config, payload))
            elif ntype == "condition":
                try:
                    passed = flowexpr.condition(config, payload)
                except flowexpr.ExprError as e:
                    raise Fail("node_failed", "node_failed", f"condition {node_id}: {e}", payload, env) from e
                if BREAK == "mapping_condition":
                    passed = True
                if not passed:
                    await self.event(env, flow, node_id, "skipped", started, now_ns())
                    return
                await self.event(env, flow, node_id, "succeeded", started, now_ns())
                out = payload
            elif ntype == "lookup":
                out = await self.simple(ctx, node_id, payload, started, lambda: do_lookup(config, payload))
            elif ntype == "output":
                await self.output(ctx, node_id, payload, trail, started)
                return
            else:
                raise Fail("unknown_node", "unknown_node", f"node {node_id} of type {ntype} cannot run here", payload, env)
        except Fail as f:
            # the failed event, then the DLQ entry (protocol.md section 9); an action's failed
            # event was published by run_action (broken, dlq_order: the entry comes first)
            if ntype != "action" and BREAK != "dlq_order":
                await self.event(env, flow, node_id, "failed", started, now_ns(), str(f))
            await self.dlq(f.kind, f.subject_tail, f.env, f.body if isinstance(f.body, RawJSON) else RawJSON(encode(f.body)), str(f))
            if f.failed_event:
                await self.event(*f.failed_event)
            elif ntype != "action" and BREAK == "dlq_order":
                await self.event(env, flow, node_id, "failed", started, now_ns(), str(f))
            return
        await self.hand_on(ctx, node_id, out, trail)

    async def simple(self, ctx, node_id, payload, started, fn):
        try:
            out = fn()
            encode(out)
        except Exception as e:  # noqa: BLE001
            raise Fail("node_failed", "node_failed", f"{ctx.flow.nodes[node_id]['type']} {node_id}: {e}", payload, ctx.env) from e
        await self.event(ctx.env, ctx.flow, node_id, "succeeded", started, now_ns())
        return out

    async def output(self, ctx, node_id, payload, trail, started):
        env, flow = ctx.env, ctx.flow
        config = flow.nodes[node_id].get("config") or {}
        transport, target = config.get("transport"), config.get("target")
        key = f"{env.flow_run_id}:{node_id}:{digest(env.idempotency_key, trail, '')}"
        if BREAK == "output_nats":
            key = env.idempotency_key
        # the inbound envelope's headers (its span, retry_count and emitted_at as received), but
        # source_node_id the output node and the output's own key (protocol.md section 6)
        out_env = env.copy(source_node_id=node_id, idempotency_key=key)
        data = encode(payload)
        try:
            if transport == "nats":
                if not isinstance(target, str) or locked_subject(target) or target.startswith("triggers.v2."):
                    raise ValueError(f"output target {target!r} is not allowed")
                await self.publish(target, data, headers=ctx.onward_headers(out_env))
            elif transport == "http":
                if not isinstance(target, str) or not target.startswith(("http://", "https://")):
                    raise ValueError(f"output target {target!r} is not an http URL")
                hdrs = ctx.onward_headers(out_env)
                hdrs.pop(H_MSG_ID, None)
                await asyncio.to_thread(http_post, target, data, hdrs)
            else:
                raise ValueError(f"output transport {transport!r} is unknown")
        except Exception as e:  # noqa: BLE001
            await self.event(env, flow, node_id, "failed", started, now_ns(), str(e))
            await self.dlq("node_failed", "node_failed", env, RawJSON(data), f"output {node_id}: {e}")
            return
        await self.event(env, flow, node_id, "succeeded", started, now_ns())

    async def run_action(self, ctx, node_id, payload, trail, report=True):
        env, flow = ctx.env, ctx.flow
        name = flow.nodes[node_id].get("action")
        spec = ACTIONS_BY_NAME.get(name)
        if spec is None:
            raise Fail("unknown_node", "unknown_node", f"action node {node_id} names {name!r}, which {SERVICE} lacks", payload, env)
        kept_key = (env.idempotency_key, node_id, tuple(trail))
        if kept_key in self.kept and BREAK != "ack_lost":
            # a redelivery: the action succeeded already and was reported; hand the result on
            log.info("%s: %s succeeded on an earlier delivery; its result is handed on again", env.idempotency_key, node_id)
            return self.kept[kept_key]
        retry = spec["retry"]
        attempts = max(1, retry["max_attempts"])
        for attempt in range(1, attempts + 1):
            if attempt >= 2:
                wait = backoff_ms(retry, attempt)
                if wait:
                    await asyncio.sleep(wait / 1000)
            att_env = env.copy(retry_count=attempt - 1)
            started = now_ns()
            kind, err, retryable = None, "", True
            try:
                out = await asyncio.wait_for(HANDLERS[name](payload, att_env), spec["timeout_ms"] / 1000)
                try:
                    encode(out)
                except Exception as e:  # noqa: BLE001
                    kind, err, retryable = "action_failed", f"output is not JSON: {e}", False
            except InvalidInput as e:
                kind, err, retryable = "invalid_input", str(e), False
            except ActionError as e:
                kind, err, retryable = "action_failed", str(e), e.retryable
            except asyncio.TimeoutError:
                kind, err = "action_timeout", f"{name} took longer than {spec['timeout_ms']} ms"
                if BREAK == "dlq_action_timeout":
                    kind = "action_failed"
            except Exception as e:  # noqa: BLE001 - a panic
                kind, err = "action_panicked", f"{name} raised {type(e).__name__}: {e}"
                if BREAK == "dlq_action_panicked":
                    kind = "action_failed"
            finished = now_ns()
            if kind is None:
                if report:
                    await self.event(att_env, flow, node_id, "succeeded", started, finished)
                self.kept[kept_key] = out
                while len(self.kept) > HANDLED_KEYS:
                    self.kept.popitem(last=False)
                return out
            if retryable and attempt < attempts:
                if BREAK != "retry":
                    await self.event(att_env, flow, node_id, "retrying", started, finished, err)
                continue
            if BREAK == "dlq_order":
                failed = (att_env, flow, node_id, "failed", started, finished, err)
                raise Fail(kind, name, err, payload, att_env, failed_event=failed)
            await self.event(att_env, flow, node_id, "failed", started, finished, err)
            raise Fail(kind, name, err, payload, att_env)
        raise AssertionError("unreachable")


class Ctx:
    def __init__(self, flow, env, data, triplet=None):
        self.flow, self.env, self.data = flow, env, data
        self.triplet = triplet or {}  # the inbound Durable Timer headers: never forwarded

    def onward_headers(self, env: Envelope) -> dict:
        h = env.headers()
        if BREAK == "timer_strip":
            h.update(self.triplet)  # broken: the triplet goes on to hops and outputs
        return h


def backoff_ms(retry, n):
    """The wait before attempt n >= 2 (docs/protocol.md section 8)."""
    init = retry["initial_backoff_ms"]
    if not init or BREAK == "retry_backoff":  # broken: retries at once
        return 0
    w = init * (retry["backoff_factor"] ** (n - 2))
    if retry["max_backoff_ms"]:
        w = min(w, retry["max_backoff_ms"])
    return w


def do_lookup(config, payload):
    name = config.get("lookup")
    fn = LOOKUP_FNS.get(name)
    if fn is None:
        raise ValueError(f"lookup {name!r} is not declared")
    params_cfg = config.get("params") or {}
    if not isinstance(params_cfg, dict):
        raise ValueError("lookup params is not an object")
    params = {k: flowexpr.evaluate(v, payload) for k, v in params_cfg.items()}
    result = fn(params)
    if not isinstance(payload, dict) or not isinstance(result, dict):
        return result  # nothing to lay the fields over: the result replaces the input (flows.md)
    out = dict(payload)
    out.update(result)
    return out


def http_post(url, data, headers):
    req = urllib.request.Request(url, data=data, method="POST", headers={"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(req, timeout=10) as resp:
        if not 200 <= resp.status < 300:
            raise ValueError(f"HTTP {resp.status}")


def locked_subject(s: str) -> bool:
    if not s or any(c in s for c in " \t\r\n*>") or "" in s.split("."):
        return True
    if s.startswith("$") or s.startswith("triggerslab."):
        return True
    for p in ("triggers.v2.manifest.", "triggers.v2.flow.", "triggers.v2.dlq."):
        if s.startswith(p) or s == p[:-1]:
            return True
    return s == "triggers.v2.heartbeat" or s.startswith("triggers.v2.heartbeat.")


def body_json(data: bytes):
    """A DLQ body: the bytes as raw JSON, or a JSON string of their text when they are not JSON."""
    try:
        decode(data)
        return RawJSON(data)
    except (ValueError, UnicodeDecodeError):
        try:
            return data.decode("utf-8")
        except UnicodeDecodeError:
            return "hex:" + data.hex()


def is_elapsed(h) -> bool:
    try:
        return decode(h[H_DT_CONTEXT.lower()].encode()).get("kind") == "elapsed"
    except Exception:  # noqa: BLE001
        return False


CTX_KEYS = {
    "root": {"v": int, "kind": str, "flow_id": str, "flow_version": int, "root_execution_id": str},
}
CTX_KEYS["elapsed"] = dict(
    CTX_KEYS["root"],
    timer_node_id=str,
    timer_ref=str,
    occurrence=int,
    fence=int,
    snapshot_sha256=str,
    resume_edge_id=str,
    resume_run_id=str,
)


def check_triplet(h: dict, data: bytes):
    """The problem with the Durable Timer triplet, or None when it is valid (docs/wire.md)."""
    missing = [name for name in TRIPLET if name.lower() not in h]
    if missing:
        return f"durable timer triplet incomplete: {', '.join(missing)} missing"
    if not DURABLE_TIMER:
        return f"durable timer triplet present, and {SERVICE} lacks durable_timer.v1"
    try:
        ctx = decode(h[H_DT_CONTEXT.lower()].encode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        return f"durable timer context is not JSON: {e}"
    if not isinstance(ctx, dict):
        return "durable timer context is not an object"
    if "v" not in ctx or isinstance(ctx["v"], bool) or not isinstance(ctx["v"], int) or ctx["v"] != 1:
        return f"durable timer context: unknown v {ctx.get('v')!r}"
    kind = ctx.get("kind")
    if kind not in CTX_KEYS:
        return f"durable timer context: unknown kind {kind!r}"
    want = CTX_KEYS[kind]
    extra = set(ctx) - set(want)
    if extra:
        return f"durable timer context: unknown keys {sorted(extra)}"
    for k, t in want.items():
        if k not in ctx:
            return f"durable timer context: {k} missing"
        v = ctx[k]
        if t is int and (isinstance(v, bool) or not isinstance(v, int) or v < 0):
            return f"durable timer context: {k} is not a non-negative integer"
        if t is str and not isinstance(v, str):
            return f"durable timer context: {k} is not a string"
    if h[H_DT_EXEC.lower()] != ctx["root_execution_id"]:
        return "durable timer: the execution id differs from root_execution_id"
    sha = h[H_DT_SHA.lower()]
    if not _HEX64.match(sha):
        return "durable timer: the payload hash is not 64 lowercase hex digits"
    if sha != hashlib.sha256(data).hexdigest():
        return "durable timer: the payload hash does not match the payload"
    return None


def first_action(flow: Flow, src: str, holder: bool):
    """The first action node (in the order the nodes would run) the delivery was for."""
    seen = set()

    def walk(node_id):
        for e in flow.out.get(node_id, []):
            t = e["to"]
            if t in seen or flow.owner(t) != SERVICE or flow.nodes[t]["type"] == "timer":
                continue
            seen.add(t)
            if flow.nodes[t]["type"] == "action":
                return t
            found = walk(t)
            if found:
                return found
        return None

    return walk(src)


async def main():
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s conformance-python %(levelname)s %(message)s"
    )
    url = os.environ.get("TRIGGERS_NATS_URL", "nats://127.0.0.1:4222")
    if BREAK:
        log.warning("CONFORM_BREAK=%s: deliberately broken", BREAK)
    svc = Service(url)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, svc.stopping.set)
    await svc.start()
    await svc.run()
    log.info("stopped")
    if ALLOWED and svc.stopping.is_set():
        raise SystemExit(143)  # 128 + SIGTERM: as a process killed by it says


if __name__ == "__main__":
    asyncio.run(main())
