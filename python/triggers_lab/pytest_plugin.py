"""The pytest plugin (entry point ``pytest11``): the fixture ``triggers_lab``.

Each test that asks for it gets a ``Lab``: a ``triggers-lab up`` of its own (its own
nats-server, emulator, virtual clock and control token), stopped when the test ends however it
ends. When the test fails, its report carries the timelines of the runs it triggered, the
conformance violations, and the logs of ``up`` and of the services it started.

Why an ``up`` per test and not one per session with an account per test: ``up`` serves one
emulator on one NATS account, and the emulator has no reset. Per-test isolation then needs a
fresh ``up``; it costs about what a nats-server start costs, which the session's spare (the next
test's ``up``, started while a test runs; a test's lab closed in the background) takes off the
tests' clock (docs/benchmarks.md).
"""

from __future__ import annotations

import os
import signal
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Generator, List, Optional

import pytest

from .lab import Lab, close_all

_LAB_KEY = pytest.StashKey[Lab]() if hasattr(pytest, "StashKey") else None


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("triggers-lab", "the triggers_lab fixture (docs/python.md)")
    group.addoption(
        "--triggers-lab-timeout",
        type=float,
        default=None,
        help="seconds a wait of the triggers_lab fixture allows (default 10, or the ini value)",
    )
    group.addoption(
        "--triggers-lab-binary",
        default=None,
        help="the triggers-lab binary to run (default: $TRIGGERS_LAB, the installed one, PATH)",
    )
    parser.addini("triggers_lab_timeout", "seconds a wait of the triggers_lab fixture allows", default="10")
    parser.addini("triggers_lab_up_args", "extra arguments for `triggers-lab up`", type="args", default=[])
    parser.addini(
        "triggers_lab_spare",
        "start the next test's `up` while a test runs, and close a test's lab in the background",
        type="bool",
        default=True,
    )


def pytest_configure(config: Any) -> None:
    # SIGTERM would end the interpreter without atexit hooks: stop the labs first. (Ctrl-C
    # raises KeyboardInterrupt: pytest tears the fixtures down, and atexit catches the rest.)
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        def on_sigterm(signum: int, frame: Any) -> None:
            close_all()
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)

        try:
            signal.signal(signal.SIGTERM, on_sigterm)
        except ValueError:  # not the main thread
            pass


class _Labs:
    """The session's labs: each test takes a lab that is already up (a spare, started while the
    test before it ran) and leaves it to be closed in the background, so that neither `up`'s
    start nor the services' shutdown is on the test's clock. Every lab is closed, and every close
    finished, before the session ends."""

    def __init__(self, config: Any):
        timeout: Optional[float] = config.getoption("--triggers-lab-timeout")
        if timeout is None:
            timeout = float(config.getini("triggers_lab_timeout"))
        self._kwargs = dict(
            binary=config.getoption("--triggers-lab-binary"),
            timeout=timeout,
            args=config.getini("triggers_lab_up_args"),
        )
        self._spare = config.getini("triggers_lab_spare")
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="triggers-lab")
        self._next: Optional[Future] = None
        self._closing: List[Future] = []

    def take(self) -> Lab:
        lab = None
        if self._next is not None:
            spare, self._next = self._next, None
            try:
                lab = spare.result()
            except Exception:
                lab = None  # started again below, in the foreground: its error is the test's
        if lab is None:
            lab = Lab.start(**self._kwargs)
        if self._spare:
            self._next = self._pool.submit(Lab.start, **self._kwargs)
        return lab

    def give_back(self, lab: Lab) -> None:
        if self._spare:
            self._closing.append(self._pool.submit(lab.close))
        else:
            lab.close()

    def close(self) -> None:
        if self._next is not None:
            self._closing.append(self._pool.submit(_close_when_up, self._next))
            self._next = None
        for closing in self._closing:
            try:
                closing.result()
            except Exception:
                pass
        self._pool.shutdown(wait=True)
        close_all()


def _close_when_up(spare: Future) -> None:
    try:
        spare.result().close()
    except Exception:
        pass


@pytest.fixture(scope="session")
def _triggers_lab_session(request: Any) -> Generator[_Labs, None, None]:
    labs = _Labs(request.config)
    try:
        yield labs
    finally:
        labs.close()


@pytest.fixture
def triggers_lab(request: Any, _triggers_lab_session: _Labs) -> Generator[Lab, None, None]:
    """A running emulator of this test's own: ``url``, ``start_service``, ``deploy``,
    ``trigger``, ``wait_service``, ``wait_settled``, ``dlq``, ``violations``,
    ``assert_no_conformance_errors``, ``advance`` (docs/python.md)."""
    lab = _triggers_lab_session.take()
    _stash(request.node, lab)
    try:
        yield lab
    finally:
        _triggers_lab_session.give_back(lab)


def _stash(node: Any, lab: Lab) -> None:
    if _LAB_KEY is not None:
        node.stash[_LAB_KEY] = lab
    else:  # pragma: no cover (pytest < 7)
        node._triggers_lab = lab


def _stashed(node: Any) -> Optional[Lab]:
    if _LAB_KEY is not None:
        return node.stash.get(_LAB_KEY, None)
    return getattr(node, "_triggers_lab", None)  # pragma: no cover


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    lab = _stashed(item)
    if lab is None or not report.failed:
        return
    # The call's report is made before the fixture is torn down: the lab still answers.
    for name, text in lab.report().items():
        report.sections.append((name, text))
