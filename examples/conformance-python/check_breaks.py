"""A small stand-in for `triggers-lab conform`, used while the kit was being written.

For each check named on the command line (all when none), it starts service.py against a running
`triggers-lab up` twice, conformant and with CONFORM_BREAK=<check>, drives the matching flow of
flows/ (deploy them first; run a second copy as `peer` for the hop checks), and says whether the
conformant run passes and the broken one fails. It watches only the one signal each break is
about; the kit itself checks far more.

    TRIGGERS_NATS_URL=... TRIGGERS_LAB=target/debug/triggers-lab python3 check_breaks.py [CHECK...]
"""
import asyncio, json, os, subprocess, sys, hashlib, time
import nats

URL = os.environ["TRIGGERS_NATS_URL"]
LAB = os.environ.get("TRIGGERS_LAB", "triggers-lab")
SVC = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "service.py")]

def lab(*a, check=False):
    r = subprocess.run([LAB, *a], capture_output=True, text=True, timeout=70)
    return r.stdout.strip().splitlines()[0] if r.stdout.strip() else ""

class Rec:
    def __init__(self): self.msgs = []
    async def cb(self, m): self.msgs.append((m.subject, dict(m.headers or {}), m.data))
    def on(self, prefix): return [(s, h, json.loads(d) if d[:1] in b'{["' else d) for s, h, d in self.msgs if s.startswith(prefix)]

def env(flow, node, key, ver="1", run="run-x1"):
    return {"X-Triggers-Flow-Run-Id": run, "X-Triggers-Flow-Id": flow, "X-Triggers-Flow-Version": ver,
            "X-Triggers-Idempotency-Key": key, "X-Triggers-Source-Node-Id": node, "Nats-Msg-Id": key}

async def alab(*a):
    r = await asyncio.to_thread(lab, *a)
    await asyncio.sleep(0.7)
    return r

async def scenario(b, nc, js, rec):
    """returns True when the check passes (conformant)"""
    k = f"k-{b}-{time.time_ns()}"
    if b == "register":
        return None
    if b == "heartbeat":
        await asyncio.sleep(6)
        hbs = [x for _, _, x in rec.on("triggers.v2.heartbeat") if x["service"] == "conformance"]
        return bool(hbs) and all(x["service_version"] == "1.0.0" for x in hbs)
    if b == "echo":
        run = await alab("trigger", "c-echo", '{"a":1}', "--wait")
        ev = [x for _, _, x in rec.on("triggers.v2.flow.events.c-echo") if x["flow_run_id"] == run and x["node_id"] == "echo"]
        return len(ev) == 1 and ev[0]["status"] == "succeeded" and len(ev[0].get("trace_id", "")) == 32
    if b == "mapping_condition":
        run = await alab("trigger", "c-mapcond", '{"go":false}', "--wait")
        ev = {x["node_id"]: x["status"] for _, _, x in rec.on("triggers.v2.flow.events.c-mapcond") if x["flow_run_id"] == run}
        return ev.get("check") == "skipped" and "echo" not in ev
    if b == "lookup":
        await alab("trigger", "c-lookup", '{"key":"k","z":1}', "--wait")
        out = [x for _, _, x in rec.on("conform.out.lookup")]
        return out[-1:] == [{"key": "k", "z": 1, "found": True, "value": "value-of-k"}]
    if b == "output_nats":
        run = await alab("trigger", "c-output", '{"a":1}', "--wait")
        out = [h for _, h, _ in rec.on("conform.out.output")]
        h = out[-1]
        return h["Nats-Msg-Id"] == h["X-Triggers-Idempotency-Key"] != f"{run}:in" and h["X-Triggers-Source-Node-Id"] == "out"
    if b == "retry":
        run = await alab("trigger", "c-flaky", '{"failures":2}', "--wait")
        st = [x["status"] for _, _, x in rec.on("triggers.v2.flow.events.c-flaky") if x["flow_run_id"] == run]
        return st == ["retrying", "retrying", "succeeded"]
    if b.startswith("dlq_action") or b == "dlq_invalid_input":
        flow, payload, tail, kind = {"dlq_action_failed": ("c-flaky", '{"failures":9}', "flaky", "action_failed"),
                                     "dlq_action_timeout": ("c-slow", '{"ms":2000}', "slow", "action_timeout"),
                                     "dlq_action_panicked": ("c-crash", '{}', "crash", "action_panicked"),
                                     "dlq_invalid_input": ("c-echo", '"text"', "echo", "invalid_input")}[b]
        run = await alab("trigger", flow, payload, "--wait")
        await asyncio.sleep(0.5)
        d = [(h, x) for _, h, x in rec.on(f"triggers.v2.dlq.conformance.{tail}") if x["envelope"]["flow_run_id"] == run]
        if len(d) != 1: return False
        h, x = d[0]
        from datetime import datetime
        occ = x["occurred_at"]; sec, frac = occ[:19], (occ[20:-1] if "." in occ else "")
        ns = int(datetime.strptime(sec, "%Y-%m-%dT%H:%M:%S").replace(tzinfo=__import__("datetime").timezone.utc).timestamp()) * 10**9 + int((frac + "0" * 9)[:9])
        return x["kind"] == kind and h["Nats-Msg-Id"] == f"{x['envelope']['idempotency_key']}:dlq:{ns}" and x["body"] == json.loads(payload)
    if b.startswith("dlq_"):
        kind = b[4:]
        hdrs, body = {"missing_envelope": (None, b"{}"), "invalid_envelope": (env("c-echo", "in", k, ver="x"), b"{}"),
                      "invalid_json": (env("c-echo", "in", k), b"not json"), "unknown_flow": (env("nope", "in", k), b"{}"),
                      "unknown_node": (env("c-echo", "zz", k), b"{}")}[kind]
        await js.publish("conformance.inbound", body, headers=hdrs)
        await asyncio.sleep(3)
        d = [x for _, _, x in rec.on(f"triggers.v2.dlq.conformance.{kind}")]
        return len(d) == 1 and d[0]["kind"] == kind and (kind != "invalid_json" or d[0]["body"] == "not json")
    if b == "hop_out":
        run = await alab("trigger", "c-hop-out", '{"a":1}', "--wait")
        h = [h for _, h, _ in rec.on("peer.inbound") if h["X-Triggers-Flow-Run-Id"] == run]
        return len(h) == 1 and h[0]["X-Triggers-Source-Node-Id"] == "echo" and h[0]["X-Triggers-Idempotency-Key"] not in (f"{run}:in",) and h[0]["Nats-Msg-Id"] == h[0]["X-Triggers-Idempotency-Key"]
    if b == "hop_in":
        run = await alab("trigger", "c-hop-in", '{"a":1}')
        await asyncio.sleep(2)
        ev = [x["node_id"] for _, _, x in rec.on("triggers.v2.flow.events.c-hop-in") if x["flow_run_id"] == run and x["service"] == "conformance"]
        return ev == ["cin", "echo"]
    if b == "timer":
        run = await alab("trigger", "c-timer", '{"t":1}')
        await asyncio.sleep(1); await alab("advance", "1h"); await asyncio.sleep(2)
        ev = [x["node_id"] for _, _, x in rec.on("triggers.v2.flow.events.c-timer") if x["flow_run_id"] == run]
        return ev == ["echo", "echo2"]
    if b == "timer_rejected":
        ctx = json.dumps({"v": 1, "kind": "root", "flow_id": "c-timer", "flow_version": 1, "root_execution_id": "run-x1"}, separators=(",", ":"))
        h = env("c-timer", "in", k); h.update({"X-Triggers-Durable-Timer-Context": ctx, "X-Triggers-Execution-Id": "run-x1",
                                             "X-Triggers-Durable-Timer-Payload-SHA256": hashlib.sha256(b"other").hexdigest()})
        await js.publish("conformance.inbound", b'{"a":1}', headers=h)
        await asyncio.sleep(2)
        d = [x for _, _, x in rec.on("triggers.v2.dlq.conformance.echo") if x["envelope"]["idempotency_key"] == k]
        ev = [x for _, _, x in rec.on("triggers.v2.flow.events.c-timer") if x["flow_run_id"] == "run-x1"]
        return len(d) == 1 and d[0]["kind"] == "durable_timer_rejected" and not ev
    if b == "conformant":
        await asyncio.sleep(1)
        hbs = [x for _, _, x in rec.on("triggers.v2.heartbeat") if x["service"] == "conformance"]
        shape = ["service", "service_version", "manifest_hash", "started_at", "now", "shutting_down"]
        return bool(hbs) and all(list(x) == shape for x in hbs)
    if b == "shutdown":
        return None
    raise ValueError(b)

async def one(b, broken):
    nc = await nats.connect(URL); js = nc.jetstream(); rec = Rec()
    for s in ("triggers.v2.>", "conform.out.>", "peer.inbound"):
        await nc.subscribe(s, cb=rec.cb)
    await nc.flush()
    e = dict(os.environ); e.pop("CONFORM_BREAK", None)
    if broken: e["CONFORM_BREAK"] = b
    p = subprocess.Popen(SVC, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    await asyncio.sleep(1.5)
    try:
        ok = await scenario(b, nc, js, rec)
    except (IndexError, KeyError) as e:  # what was expected did not arrive
        print(f"  {b}: {e!r}", flush=True)
        ok = False
    finally:
        if p.poll() is None:
            p.terminate()
            try: p.wait(35)
            except subprocess.TimeoutExpired: p.kill()
    await asyncio.sleep(0.3)
    if b == "register":
        ok = "refused" not in p.stderr.read()
    if b == "shutdown":
        ok = any(json.loads(d).get("shutting_down") for s, _, d in rec.msgs if s == "triggers.v2.heartbeat" and b'"conformance"' in d)
    await nc.close()
    return ok

ALL = ["register", "heartbeat", "echo", "mapping_condition", "lookup", "output_nats", "retry",
       "dlq_action_failed", "dlq_action_timeout", "dlq_action_panicked", "dlq_invalid_input",
       "dlq_missing_envelope", "dlq_invalid_envelope", "dlq_invalid_json", "dlq_unknown_flow",
       "dlq_unknown_node", "hop_out", "hop_in", "timer", "timer_rejected", "conformant", "shutdown"]


async def main():
    names = sys.argv[1:] or ALL
    for b in names:
        good = await one(b, False)
        bad = await one(b, True)
        print(f"{b:22} conformant run passes: {good!s:5}  CONFORM_BREAK fails it: {(not bad)!s:5}", flush=True)
asyncio.run(main())
