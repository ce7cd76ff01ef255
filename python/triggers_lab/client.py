"""A client of the emulator's control API (docs/emulator.md, "The control API"), on nats-py.

``AsyncControlClient`` is the asyncio client: one method per op, and the waits a test needs
(``wait_service``, ``wait_settled``, ``wait_for_dlq``, ``wait_for_violation``). ``ControlClient``
is the same API for synchronous code (a pytest test): it runs the asyncio client on an event
loop of its own, in a thread.

Find a running ``triggers-lab up`` with ``Discovery``: by its instance name, by its URL, or the
only one running; it holds the URL, the control account's user and password and the token.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Optional, TypeVar, Union

from .errors import ControlError, NoEmulator, WaitTimeout
from .types import (
    OPS,
    Advanced,
    Cancelled,
    Deployment,
    DlqRecord,
    Flow,
    FlowSummary,
    FollowLease,
    Record,
    Resent,
    Run,
    RunPage,
    ServiceState,
    StateSummary,
    Violation,
)

T = TypeVar("T")

#: The control API's subjects: ``triggerslab.v1.control.<op>``.
CONTROL_PREFIX = "triggerslab.v1.control"
#: The header the token travels in.
TOKEN_HEADER = "Triggers-Lab-Token"
#: A run's statuses that are final.
SETTLED = ("succeeded", "failed", "cancelled")
#: How often a wait asks again. A request costs about a millisecond on loopback.
POLL_S = 0.02
#: The default time a wait allows.
DEFAULT_TIMEOUT_S = 10.0

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)")
_UNIT_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def duration_ms(d: Union[str, int, float]) -> int:
    """``"1h"``, ``"1h30m"``, ``"250ms"``, ``"2d"`` or seconds (a number) as milliseconds."""
    if isinstance(d, (int, float)):
        if d < 0:
            raise ValueError(f"a duration cannot be negative: {d}")
        return int(round(d * 1000))
    text = d.strip().replace(" ", "")
    if re.fullmatch(r"\d+(\.\d+)?", text):
        return duration_ms(float(text))
    pos, total = 0, 0.0
    for m in _DURATION_PART.finditer(text):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNIT_MS[m.group(2)]
        pos = m.end()
    if pos != len(text) or not text:
        raise ValueError(f"not a duration: {d!r} (e.g. 250ms, 30s, 5m, 2h, 1d, 1h30m, or seconds)")
    return int(round(total))


# -- discovery ------------------------------------------------------------------------------------


def discovery_dir() -> Path:
    """Where each ``up`` writes ``<instance>.json``: as the CLI decides (cli/src/discovery.rs)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isabs(runtime):
        return Path(runtime) / "triggers-lab"
    cache = os.environ.get("XDG_CACHE_HOME")
    if not (cache and os.path.isabs(cache)):
        home = os.environ.get("HOME")
        if not (home and os.path.isabs(home)):
            raise NoEmulator("nowhere to look for a running `up`: set XDG_RUNTIME_DIR or HOME")
        cache = os.path.join(home, "Library/Caches" if sys.platform == "darwin" else ".cache")
    return Path(cache) / "triggers-lab"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Discovery:
    """What one ``up`` wrote down: its name, pid, URL and the control API's credentials."""

    instance: str
    pid: int
    url: str
    backend: str = ""
    user: Optional[str] = None
    password: Optional[str] = None
    token: Optional[str] = None

    @classmethod
    def from_file(cls, path: Union[str, Path]) -> "Discovery":
        data = json.loads(Path(path).read_text())
        return cls(
            instance=str(data["instance"]),
            pid=int(data["pid"]),
            url=str(data["url"]),
            backend=str(data.get("backend", "")),
            user=data.get("user"),
            password=data.get("password"),
            token=data.get("token"),
        )

    @classmethod
    def running(cls) -> List["Discovery"]:
        """Every ``up`` running (entries of ``up``\\ s that are gone are passed over)."""
        found = []
        try:
            entries = sorted(discovery_dir().glob("*.json"))
        except OSError:
            return []
        for path in entries:
            if path.is_symlink() or not path.is_file():
                continue
            try:
                d = cls.from_file(path)
            except (OSError, ValueError, KeyError):
                continue
            if _alive(d.pid):
                found.append(d)
        return found

    @classmethod
    def find(cls, instance: Optional[str] = None, url: Optional[str] = None) -> "Discovery":
        """The ``up`` named ``instance``, else the one at ``url``, else the only one running."""
        running = cls.running()
        if instance is not None:
            for d in running:
                if d.instance == instance:
                    return d
            raise NoEmulator(f"no `triggers-lab up` named {instance!r} runs ({_names(running)})")
        if url is not None:
            for d in running:
                if d.url == url:
                    return d
            # An `up` we have no entry for (another user's, an emulator in a Rust test): an open
            # control API, no token.
            return cls(instance="", pid=0, url=url)
        if len(running) == 1:
            return running[0]
        if not running:
            raise NoEmulator("no `triggers-lab up` runs: start one (`triggers-lab up`)")
        raise NoEmulator(f"several `triggers-lab up` run, name one: {_names(running)}")


async def _ignore_error(e: Exception) -> None:
    pass


def _names(running: Iterable[Discovery]) -> str:
    listed = ", ".join(f"{d.instance} (pid {d.pid}, {d.url})" for d in running)
    return listed or "none runs"


# -- the asyncio client ---------------------------------------------------------------------------


class AsyncControlClient:
    """The control API over one nats-py connection. Make one with ``connect``."""

    def __init__(self, nc: Any, token: Optional[str], timeout: float = DEFAULT_TIMEOUT_S):
        self._nc = nc
        self._token = token
        #: The default time a wait allows, in seconds.
        self.timeout = timeout
        self._dlq_since = 0
        self._dlq: List[DlqRecord] = []

    @classmethod
    async def connect(
        cls,
        instance: Optional[str] = None,
        url: Optional[str] = None,
        *,
        discovery: Optional[Discovery] = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ) -> "AsyncControlClient":
        """Connects to a running ``up``: by its discovery entry (``instance``), its ``url``, or
        the only one running; or to the ``discovery`` given."""
        import nats  # nats-py

        d = discovery or Discovery.find(instance=instance, url=url)
        options: Dict[str, Any] = {
            "name": "triggers-lab python control",
            "allow_reconnect": False,
            "connect_timeout": 5,
            # nats-py prints every connection error by default; a closed `up` is not news here
            # (a request to it fails, saying so).
            "error_cb": _ignore_error,
        }
        if d.user:
            options["user"] = d.user
            options["password"] = d.password or ""
        nc = await nats.connect(d.url, **options)
        return cls(nc, d.token, timeout)

    async def close(self) -> None:
        await self._nc.close()

    async def request(self, op: str, body: Optional[dict] = None, timeout: float = 10.0) -> Any:
        """One control request: the reply's ``result``, or ``ControlError`` with its message."""
        headers = {TOKEN_HEADER: self._token} if self._token else None
        data = json.dumps(body or {}).encode()
        msg = await self._nc.request(
            f"{CONTROL_PREFIX}.{op}", data, timeout=timeout, headers=headers
        )
        try:
            reply = json.loads(msg.data)
        except ValueError as e:
            raise ControlError(op, f"the reply is not JSON ({e}): {msg.data[:200]!r}") from None
        if not isinstance(reply, dict) or not reply.get("ok"):
            error = reply.get("error") if isinstance(reply, dict) else reply
            raise ControlError.from_reply(op, error)
        return reply.get("result")

    # -- one method per op ------------------------------------------------------------------

    async def state(self, runs_limit: Optional[int] = None) -> StateSummary:
        return await self.request("state", {} if runs_limit is None else {"runs_limit": runs_limit})

    async def deploy(self, flow: dict) -> Deployment:
        """Deploys a flow (a dict); ``{"flow": released flow, "broadcast_subject"}``."""
        return await self.request("deploy", {"flow": flow})

    async def check_release(self, flow: dict) -> Flow:
        return await self.request("check_release", {"flow": flow})

    async def trigger(
        self,
        flow_id: str,
        payload: Any = None,
        *,
        entry: Optional[str] = None,
        payload_json: Optional[str] = None,
    ) -> str:
        """Starts a run; its id. ``payload_json`` is sent byte for byte instead of ``payload``."""
        body: Dict[str, Any] = {"flow_id": flow_id, "payload": payload}
        if entry is not None:
            body["entry"] = entry
        if payload_json is not None:
            body["payload_json"] = payload_json
        return (await self.request("trigger", body))["run_id"]

    async def resend_dlq(self, msg_id: str) -> Resent:
        return await self.request("resend_dlq", {"msg_id": msg_id})

    async def advance(self, duration: Union[str, int, float]) -> Advanced:
        """Moves the virtual clock (``"1h"``, ``"90s"``, or seconds); ``{"fired", "clock"}``."""
        return await self.request("advance", {"duration_ms": duration_ms(duration)})

    async def cancel(self, run_id: str) -> Cancelled:
        return await self.request("cancel", {"run_id": run_id})

    async def run(self, run_id: str) -> Run:
        """The run, whole: its timeline is read a page at a time when it is long."""
        run = await self.request("run", {"run_id": run_id, "timeline_from": 0})
        timeline = list(run.get("timeline", []))
        total = run.get("timeline_total", len(timeline))
        while len(timeline) < total:
            page = await self.request("run", {"run_id": run_id, "timeline_from": len(timeline)})
            more = page.get("timeline", [])
            if not more:
                break
            timeline.extend(more)
        run["timeline"] = timeline
        run.pop("timeline_from", None)
        run.pop("timeline_total", None)
        return run

    async def runs(self) -> List[Run]:
        """Every run, whole (an error once they outgrow one message: use ``run_page``)."""
        return await self.request("runs")

    async def run_page(self, after: int = 0, limit: Optional[int] = None) -> RunPage:
        body: Dict[str, Any] = {"after": after}
        if limit is not None:
            body["limit"] = limit
        return await self.request("run_page", body)

    async def flow(self, flow_id: str) -> Flow:
        return await self.request("flow", {"flow_id": flow_id})

    async def flow_list(self) -> List[FlowSummary]:
        return await self.request("flow_list")

    async def records(self, since: int = 0, limit: int = 1000) -> List[Record]:
        """Records after ``since`` (a ``seq``): at most ``limit``, as many as fit in a message."""
        return await self.request("records", {"since": since, "limit": limit})

    async def violations(self) -> List[Violation]:
        """Every violation, read a page at a time."""
        out: List[Violation] = []
        while True:
            page = await self.request("violations", {"after": len(out), "limit": 1000})
            if not page:
                return out
            out.extend(page)

    async def services(self) -> Dict[str, ServiceState]:
        """Every registered service by name, read a page at a time."""
        out: Dict[str, ServiceState] = {}
        after: Optional[str] = None
        while True:
            body: Dict[str, Any] = {"limit": 1000}
            if after is not None:
                body["after"] = after
            page = await self.request("services", body)
            if not page:
                return out
            out.update(page)
            after = max(page)

    async def follow(self, lease_ms: Optional[int] = None) -> FollowLease:
        """Asks for the records on ``triggerslab.v1.records[.<token>]`` for a lease;
        ``{"subject", "lease_ms"}``. Renew it before it runs out to keep them coming."""
        return await self.request("follow", {} if lease_ms is None else {"lease_ms": lease_ms})

    # -- reads a test wants ------------------------------------------------------------------

    async def dlq(self, run_id: Optional[str] = None) -> List[DlqRecord]:
        """The DLQ entries the emulator recorded, oldest first (each a record: ``subject``,
        ``msg_id``, ``entry`` with ``kind``, ``err_msg``, ``envelope``, ``body``); only
        ``run_id``'s when given."""
        while True:
            page = await self.records(self._dlq_since, 1000)
            if not page:
                break
            self._dlq_since = page[-1]["seq"]
            self._dlq.extend(r for r in page if r.get("kind") == "dlq")
        if run_id is None:
            return list(self._dlq)
        return [r for r in self._dlq if dlq_run_id(r) == run_id]

    # -- waits (no sleeps in a test) ---------------------------------------------------------

    async def _until(
        self,
        what: str,
        probe: Callable[[], Awaitable[Optional[T]]],
        timeout: Optional[float],
        seen: Callable[[], str] = lambda: "",
    ) -> T:
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            got = await probe()
            if got is not None:
                return got
            if time.monotonic() >= deadline:
                last = seen()
                raise WaitTimeout(
                    f"timed out after {self.timeout if timeout is None else timeout:g}s waiting for {what}"
                    + (f"; {last}" if last else "")
                )
            await asyncio.sleep(POLL_S)

    async def wait_service(self, name: str, timeout: Optional[float] = None) -> dict:
        """Waits until a service named ``name`` has registered; its entry of ``state``."""
        names: List[str] = []

        async def probe() -> Optional[dict]:
            nonlocal names
            services = (await self.state(runs_limit=0)).get("services", [])
            names = [s.get("name", "") for s in services]
            return next((s for s in services if s.get("name") == name), None)

        return await self._until(
            f"service {name!r} to register", probe, timeout,
            lambda: f"registered: {', '.join(names) or 'none'}",
        )

    async def wait_run(
        self,
        run_id: str,
        statuses: Iterable[str] = SETTLED,
        timeout: Optional[float] = None,
    ) -> Run:
        """Waits until the run's status is one of ``statuses``; the run."""
        wanted = tuple(statuses)
        last: Dict[str, Any] = {}

        async def probe() -> Optional[Run]:
            nonlocal last
            last = await self.request("run", {"run_id": run_id})
            return await self.run(run_id) if last.get("status") in wanted else None

        return await self._until(
            f"run {run_id} to be {' or '.join(wanted)}", probe, timeout,
            lambda: describe_run(last) if last else "",
        )

    async def wait_settled(
        self, run_id: str, timeout: Optional[float] = None, *, idle_s: float = 1.0
    ) -> Run:
        """Waits until the run settles (succeeded, failed or cancelled); the run, as the ``run``
        op returns it. A run that waits on the virtual clock with nothing else pending for
        ``idle_s`` will not settle by itself: that raises ``WaitTimeout`` at once, naming its
        armed timers (``advance`` fires them)."""
        last: Dict[str, Any] = {}
        waiting_since: Optional[float] = None

        async def probe() -> Optional[Run]:
            nonlocal last, waiting_since
            last = await self.request("run", {"run_id": run_id})
            status = last.get("status")
            if status in SETTLED:
                return await self.run(run_id)
            if status == "waiting" and not last.get("pending"):
                waiting_since = waiting_since or time.monotonic()
                if time.monotonic() - waiting_since >= idle_s:
                    raise WaitTimeout(
                        f"run {run_id} waits on the virtual clock with nothing pending: "
                        f"{describe_run(last)}; advance the clock (advance(\"1h\")) to fire its timers"
                    )
            else:
                waiting_since = None
            return None

        return await self._until(
            f"run {run_id} to settle", probe, timeout,
            lambda: describe_run(last) if last else "",
        )

    async def wait_for_dlq(
        self,
        run_id: Optional[str] = None,
        kind: Optional[str] = None,
        count: int = 1,
        timeout: Optional[float] = None,
    ) -> List[DlqRecord]:
        """Waits until at least ``count`` DLQ entries (of ``run_id``, of ``kind``) are recorded;
        those entries."""

        async def probe() -> Optional[List[DlqRecord]]:
            found = [
                r for r in await self.dlq(run_id)
                if kind is None or (r.get("entry") or {}).get("kind") == kind
            ]
            return found if len(found) >= count else None

        what = f"{count} DLQ entr{'y' if count == 1 else 'ies'}"
        if kind:
            what += f" of kind {kind!r}"
        if run_id:
            what += f" for run {run_id}"
        return await self._until(
            what, probe, timeout,
            lambda: f"entries so far: {[dlq_summary(r) for r in self._dlq] or 'none'}",
        )

    async def wait_for_violation(
        self, rule: str, timeout: Optional[float] = None
    ) -> Violation:
        """Waits until a violation of ``rule`` is recorded; the first one."""
        seen: List[Violation] = []

        async def probe() -> Optional[Violation]:
            nonlocal seen
            seen = await self.violations()
            return next((v for v in seen if v.get("rule") == rule), None)

        return await self._until(
            f"a violation of rule {rule!r}", probe, timeout,
            lambda: f"violations so far: {sorted({v.get('rule') for v in seen}) or 'none'}",
        )


def dlq_run_id(record: DlqRecord) -> str:
    entry = record.get("entry") or {}
    return (entry.get("envelope") or {}).get("flow_run_id", "")


def dlq_summary(record: DlqRecord) -> str:
    entry = record.get("entry") or {}
    return f"{record.get('subject', '')} {entry.get('kind', '(does not decode)')} run {dlq_run_id(record) or '-'}"


def describe_run(run: dict) -> str:
    """One line: status, pending nodes, armed timers, failed nodes."""
    parts = [f"status {run.get('status', '?')}"]
    for key in ("pending", "failed"):
        if run.get(key):
            parts.append(f"{key}: {', '.join(map(str, run[key]))}")
    if run.get("timers"):
        parts.append("timers: " + ", ".join(
            f"{t.get('node_id', t)} due {t.get('due', '?')}" if isinstance(t, dict) else str(t)
            for t in run["timers"]
        ))
    return "; ".join(parts)


def format_timeline(run: dict) -> str:
    """A run as a failing scenario prints it: a header line, then one line per timeline entry."""
    lines = [f"run {run.get('id')} of flow {run.get('flow_id')} v{run.get('flow_version')}: {describe_run(run)}"]
    for e in run.get("timeline", []):
        retries = f" (retries {e['retries']})" if e.get("retries") else ""
        error = f": {e['error']}" if e.get("error") else ""
        lines.append(
            f"  #{e.get('seq', '?'):<5} {e.get('node_id', '?'):<16} {e.get('node_type', ''):<11} "
            f"{e.get('service', ''):<14} {e.get('status', '?')}{retries}{error}"
        )
    if run.get("dlq"):
        lines.append(f"  DLQ entries (record seq): {run['dlq']}")
    return "\n".join(lines)


# -- the synchronous client -----------------------------------------------------------------------


class _Loop:
    """An asyncio event loop in a daemon thread, for synchronous callers."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self.loop.run_forever, name="triggers-lab-control", daemon=True
        )
        self._thread.start()

    def call(self, coro: Awaitable[T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result()  # type: ignore[arg-type]

    def stop(self) -> None:
        if self.loop.is_running():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=5)
        if not self.loop.is_running():
            self.loop.close()


class ControlClient:
    """``AsyncControlClient``'s API for synchronous code: the same methods, not awaited."""

    def __init__(
        self,
        instance: Optional[str] = None,
        url: Optional[str] = None,
        *,
        discovery: Optional[Discovery] = None,
        timeout: float = DEFAULT_TIMEOUT_S,
    ):
        self._loop = _Loop()
        try:
            self.aio: AsyncControlClient = self._loop.call(
                AsyncControlClient.connect(instance, url, discovery=discovery, timeout=timeout)
            )
        except BaseException:
            self._loop.stop()
            raise

    def close(self) -> None:
        try:
            self._loop.call(self.aio.close())
        finally:
            self._loop.stop()

    def __enter__(self) -> "ControlClient":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.aio, name)
        if not asyncio.iscoroutinefunction(attr):
            return attr

        def call(*args: Any, **kwargs: Any) -> Any:
            return self._loop.call(attr(*args, **kwargs))

        call.__name__ = name
        call.__doc__ = attr.__doc__
        return call


#: The ops this client has a method for (the same name), checked against the schema's ops by
#: the tests so that the two cannot drift.
CLIENT_OPS = tuple(op for op in OPS if callable(getattr(AsyncControlClient, op, None)))
