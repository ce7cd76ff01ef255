"""``Lab``: a ``triggers-lab up`` of its own, its control client, and the services a test starts
on it; what the pytest fixture ``triggers_lab`` hands a test (usable without pytest too).

Everything it starts is stopped by ``close()``, whatever happened: each process runs in a process
group of its own, stopped with SIGTERM then SIGKILL; ``up`` stops its nats-server and deletes its
store on SIGTERM, and its server's watchdog kills the server if ``up`` itself is killed. Labs not
closed when the interpreter exits (Ctrl-C, SIGTERM) are closed by an ``atexit`` hook.
"""

from __future__ import annotations

import atexit
import itertools
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Union

from ._find import find_triggers_lab
from .client import (
    DEFAULT_TIMEOUT_S,
    ControlClient,
    Discovery,
    discovery_dir,
    format_timeline,
)
from .errors import ControlError, NoEmulator, TriggersLabError
from .types import DlqRecord, Run, Violation

#: How long ``up`` may take to write its discovery entry.
START_TIMEOUT_S = 60.0
#: How long a process is given to stop after SIGTERM before SIGKILL.
STOP_GRACE_S = 10.0
#: The most runs a failing test's report shows (the last ones).
REPORT_RUNS = 20
#: The most of a log attached to a report.
LOG_TAIL_BYTES = 64 * 1024

_counter = itertools.count(1)
_live: "weakref.WeakSet[Lab]" = weakref.WeakSet()
# Re-entrant: the SIGTERM handler may run close_all() while the main thread holds it.
_live_lock = threading.RLock()


class Process:
    """A process a ``Lab`` started (``up`` or a service), its output in a log file."""

    def __init__(self, name: str, argv: Sequence[str], log: Path, env: Mapping[str, str],
                 cwd: Optional[Union[str, Path]] = None):
        self.name = name
        self.argv = list(argv)
        self.log_path = log
        self._log = open(log, "wb")
        self.popen = subprocess.Popen(
            self.argv,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=cwd,
            # A group of its own: stopping it reaches whatever it started, and a Ctrl-C at the
            # terminal reaches pytest alone, which then stops everything in order.
            start_new_session=True,
        )

    @property
    def pid(self) -> int:
        return self.popen.pid

    def alive(self) -> bool:
        return self.popen.poll() is None

    def stop(self, grace: float = STOP_GRACE_S) -> Optional[int]:
        """SIGTERM to its group, SIGKILL after ``grace``; its exit status."""
        try:
            if self.popen.poll() is None:
                _signal_group(self.popen.pid, signal.SIGTERM)
                try:
                    self.popen.wait(timeout=grace)
                except subprocess.TimeoutExpired:
                    pass
            # Whatever is left in its group (it exited, a child did not).
            _signal_group(self.popen.pid, signal.SIGKILL)
            if self.popen.poll() is None:
                self.popen.wait(timeout=grace)
        finally:
            self._log.close()
        return self.popen.returncode

    def log(self, limit: int = LOG_TAIL_BYTES) -> str:
        """The end of its output (at most ``limit`` bytes)."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - limit))
                text = f.read().decode("utf-8", "replace")
        except OSError:
            return ""
        return text if size <= limit else f"[... the first {size - limit} bytes left out]\n{text}"


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class Lab:
    """A running ``triggers-lab up`` of one's own (``Lab.start()``), and what a test does on it.

    ``url`` is what a service under test connects to (no credentials: the control API is out of
    its reach). ``client`` is the full control client (``ControlClient``).
    """

    def __init__(self, *, binary: Optional[str] = None, timeout: float = DEFAULT_TIMEOUT_S,
                 args: Sequence[str] = (), env: Optional[Mapping[str, str]] = None):
        self.timeout = timeout
        self.binary = binary or find_triggers_lab()
        self.instance = f"pytest-{os.getpid()}-{next(_counter)}"
        self.workdir = Path(tempfile.mkdtemp(prefix=f"triggers-lab-{self.instance}-"))
        self.services: List[Process] = []
        self._env = dict(os.environ if env is None else env)
        self._closed = False
        # A lab may be started in one thread (the plugin's spare) and closed from another (the
        # atexit hook): what it starts and close() take turns.
        self._lock = threading.Lock()
        self.client: Optional[ControlClient] = None
        self.discovery: Optional[Discovery] = None
        with _live_lock:
            _live.add(self)
        try:
            # What `up` makes (its nats-server's store, config and log) goes in the lab's folder:
            # nothing of it can outlive close(), which removes the folder.
            up_tmp = self.workdir / "tmp"
            up_tmp.mkdir()
            with self._lock:
                if self._closed:
                    raise TriggersLabError("closed while it started")
                self.up = Process(
                    "up",
                    [self.binary, "up", "--port", "0", "--instance", self.instance, *args],
                    self.workdir / "up.log",
                    {**self._env, "TMPDIR": str(up_tmp)},
                )
            self.discovery = self._wait_discovery()
            client = ControlClient(discovery=self.discovery, timeout=timeout)
            with self._lock:
                if self._closed:
                    client.close()
                    raise TriggersLabError("closed while it started")
                self.client = client
        except BaseException:
            self.close()
            raise

    @classmethod
    def start(cls, **kwargs: Any) -> "Lab":
        """Starts ``triggers-lab up --port 0`` under a fresh instance name; returns once its
        control API answers."""
        return cls(**kwargs)

    def _wait_discovery(self) -> Discovery:
        path = discovery_dir() / f"{self.instance}.json"
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if not self.up.alive():
                raise NoEmulator(
                    f"`triggers-lab up` exited with status {self.up.popen.returncode} before it "
                    f"was up; its output:\n{self.up.log()}"
                )
            try:
                found = Discovery.from_file(path)
                if found.pid == self.up.pid:
                    return found
            except (OSError, ValueError, KeyError):
                pass
            time.sleep(0.01)
        raise NoEmulator(
            f"`triggers-lab up` did not write {path} within {START_TIMEOUT_S:g}s; its output:\n"
            f"{self.up.log()}"
        )

    # -- what a test uses --------------------------------------------------------------------

    @property
    def url(self) -> str:
        """The NATS URL a service under test connects to (``TRIGGERS_NATS_URL``)."""
        assert self.discovery is not None
        return self.discovery.url

    def start_service(
        self,
        argv: Sequence[str],
        *,
        name: Optional[str] = None,
        env: Optional[Mapping[str, str]] = None,
        cwd: Optional[Union[str, Path]] = None,
    ) -> Process:
        """Starts a service (a command) with ``TRIGGERS_NATS_URL`` set to ``url``; it is stopped
        (SIGTERM, then SIGKILL) when the lab closes, and its output attached to a failing test's
        report."""
        name = name or Path(argv[0]).name
        full_env = dict(self._env)
        full_env["TRIGGERS_NATS_URL"] = self.url
        full_env.update(env or {})
        log = self.workdir / f"service-{len(self.services) + 1}-{_safe(name)}.log"
        process = Process(name, argv, log, full_env, cwd=cwd)
        self.services.append(process)
        return process

    def deploy(self, flow: Union[dict, str, Path]) -> dict:
        """Deploys a flow: a dict, or a path to a JSON or YAML flow file (a YAML file is read by
        ``triggers-lab deploy``, as scenarios read flows: an unknown key is an error at its
        line). ``{"flow": released flow, "broadcast_subject"}``; a refused release raises
        ``ControlError`` with its ``problems``."""
        if isinstance(flow, dict):
            return self._client.deploy(flow)
        path = Path(flow)
        if path.suffix.lower() == ".json":
            return self._client.deploy(json.loads(path.read_text()))
        since = self._client.state(runs_limit=0).get("last_seq", 0)
        done = subprocess.run(
            [self.binary, "deploy", str(path), "--instance", self.instance],
            stdin=subprocess.DEVNULL, capture_output=True, text=True, env=self._env,
        )
        if done.returncode != 0:
            raise ControlError(
                "deploy",
                f"{path}: {done.stderr.strip() or done.stdout.strip()}",
                self._refused_problems(since),
            )
        # The flow as released: its id is in what deploy printed (`deployed <id> v<n>, ...`).
        words = done.stdout.split()
        flow_id = words[1] if len(words) > 1 and words[0] == "deployed" else None
        if flow_id is None:
            raise TriggersLabError(f"unexpected output of triggers-lab deploy: {done.stdout!r}")
        released = self._client.flow(flow_id)
        return {"flow": released, "broadcast_subject": words[-1] if words else ""}

    def _refused_problems(self, since: int) -> List[dict]:
        """The problems of the release `deploy` just saw refused, from the emulator's record of
        it (``code (node N): message``, as the CLI and the log write them); none when the file
        was refused before it reached the emulator (an unknown key, bad YAML)."""
        problems: List[dict] = []
        for record in self._client.records(since, 1000):
            if record.get("kind") == "deploy_refused":
                for text in record.get("problems", []):
                    m = _PROBLEM.match(text)
                    problem = {"code": m.group(1), "message": m.group(3)} if m else {"code": "", "message": text}
                    if m and m.group(2):
                        problem["node"] = m.group(2)
                    problems.append(problem)
        return problems

    def trigger(self, flow_id: str, payload: Any = None, **kwargs: Any) -> str:
        """Starts a run of ``flow_id`` with ``payload``; its run id."""
        return self._client.trigger(flow_id, payload, **kwargs)

    def wait_service(self, name: str, timeout: Optional[float] = None) -> dict:
        """Waits until the service ``name`` has registered. A service this lab started that
        exits meanwhile fails the wait at once, with its output."""
        deadline = time.monotonic() + (self.timeout if timeout is None else timeout)
        while True:
            try:
                return self._client.wait_service(name, timeout=min(0.5, max(0.0, deadline - time.monotonic())))
            except TimeoutError:
                for p in self.services:
                    if not p.alive():
                        raise TriggersLabError(
                            f"service {p.name} exited with status {p.popen.returncode} before "
                            f"{name!r} registered; its output:\n{p.log()}"
                        ) from None
                if time.monotonic() >= deadline:
                    raise

    def wait_settled(self, run_id: str, timeout: Optional[float] = None) -> Run:
        """Waits until the run settles; the run (``status``, ``timeline``, ...)."""
        return self._client.wait_settled(run_id, timeout)

    def wait_run(self, run_id: str, *statuses: str, timeout: Optional[float] = None) -> Run:
        """Waits until the run's status is one of ``statuses`` (e.g. ``"waiting"``: only a
        timer is armed); the run."""
        return self._client.wait_run(run_id, statuses or ("succeeded", "failed", "cancelled"), timeout)

    def wait_for_dlq(self, run_id: Optional[str] = None, kind: Optional[str] = None,
                     count: int = 1, timeout: Optional[float] = None) -> List[DlqRecord]:
        return self._client.wait_for_dlq(run_id, kind, count, timeout)

    def wait_for_violation(self, rule: str, timeout: Optional[float] = None) -> Violation:
        return self._client.wait_for_violation(rule, timeout)

    def dlq(self, run_id: Optional[str] = None) -> List[DlqRecord]:
        """The DLQ entries recorded so far (``run_id``'s only, when given)."""
        return self._client.dlq(run_id)

    def violations(self) -> List[Violation]:
        """Every conformance violation recorded so far."""
        return self._client.violations()

    def assert_no_conformance_errors(self) -> None:
        """Fails (``AssertionError``) when a violation of severity ``error`` was recorded,
        listing them."""
        errors = [v for v in self.violations() if v.get("severity") == "error"]
        if errors:
            raise AssertionError(
                f"{len(errors)} conformance error{'s' if len(errors) != 1 else ''}:\n"
                + "\n".join(format_violation(v) for v in errors)
            )

    def advance(self, duration: Union[str, int, float]) -> dict:
        """Moves the virtual clock (``"1h"``, ``"90s"``, seconds); ``{"fired", "clock"}``."""
        return self._client.advance(duration)

    def run(self, run_id: str) -> Run:
        return self._client.run(run_id)

    # -- reports and teardown ----------------------------------------------------------------

    @property
    def _client(self) -> ControlClient:
        if self.client is None:
            raise TriggersLabError("this lab is closed")
        return self.client

    def report(self) -> Dict[str, str]:
        """What a failing test's report shows: the runs this lab triggered with their timelines,
        the violations, the log of ``up`` and of each service. Never raises."""
        sections: Dict[str, str] = {}
        if self.client is not None and self.up.alive():
            try:
                runs = [format_timeline(self.client.run(r)) for r in self._run_ids()]
                sections["triggers-lab runs"] = "\n".join(runs) or "(no run)"
            except Exception as e:  # the report must not hide the test's own failure
                sections["triggers-lab runs"] = f"(could not read the runs: {e})"
            try:
                violations = self.client.violations()
                sections["triggers-lab violations"] = (
                    "\n".join(format_violation(v) for v in violations) or "(none)"
                )
            except Exception as e:
                sections["triggers-lab violations"] = f"(could not read them: {e})"
        sections[f"triggers-lab up log ({self.instance})"] = self.up.log()
        for p in self.services:
            sections[f"service {p.name} log (pid {p.pid})"] = p.log()
        return sections

    def _run_ids(self) -> List[str]:
        """The runs of this lab's emulator (every run is this test's, however it was started),
        the last ``REPORT_RUNS`` of them."""
        ids: List[str] = []
        after = 0
        while True:
            page = self._client.run_page(after)
            ids.extend(r["id"] for r in page.get("runs", []))
            ids = ids[-REPORT_RUNS:]
            if not page.get("more") or page.get("next", after) == after:
                return ids
            after = page["next"]

    def close(self) -> None:
        """Stops the services, then ``up`` (its server and store go with it), and removes the
        lab's folder. Safe to call twice, and from any state."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        try:
            if self.client is not None:
                try:
                    self.client.close()
                except Exception:
                    pass
                self.client = None
            for p in reversed(self.services):
                p.stop()
            up = getattr(self, "up", None)
            if up is not None:
                up.stop()
                # `up` removes its own entry; after a SIGKILL it could not.
                try:
                    entry = discovery_dir() / f"{self.instance}.json"
                    if Discovery.from_file(entry).pid == up.pid:
                        entry.unlink()
                except (OSError, ValueError, KeyError, NoEmulator):
                    pass
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)
            with _live_lock:
                _live.discard(self)

    def __enter__(self) -> "Lab":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def format_violation(v: Violation) -> str:
    return f"  {v.get('severity', '?').upper():<7} {v.get('rule', '?')} on {v.get('subject', '?')}: {v.get('message', '')}"


_PROBLEM = re.compile(r"^([a-z0-9_]+)(?: \(node ([^)]*)\))?: (.*)$", re.S)


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)[:40]


def close_all() -> None:
    """Closes every lab still open (the ``atexit`` hook, and the plugin on a signal)."""
    with _live_lock:
        labs = list(_live)
    for lab in labs:
        try:
            lab.close()
        except Exception:
            pass


atexit.register(close_all)
