"""Shared by the suite: pytester, and how an inner pytest run finds the plugin."""

import os
import signal
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

PYTHON_DIR = Path(__file__).resolve().parents[1]


def _installed() -> bool:
    eps = metadata.entry_points()
    group = eps.select(group="pytest11") if hasattr(eps, "select") else eps.get("pytest11", [])
    return any(ep.name == "triggers_lab" for ep in group)


#: Whether the wheel is installed (its entry point loads the plugin); from a checkout without it,
#: the package is taken from python/ and the plugin named with -p.
INSTALLED = _installed()


def run_pytest(folder: Path, *args: str, timeout: float = 180, popen: bool = False, env=None):
    """pytest in a process of its own, in ``folder``, with the plugin; a CompletedProcess (or the
    Popen when ``popen``)."""
    full_env = dict(os.environ if env is None else env)
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args]
    if not INSTALLED:
        argv[3:3] = ["-p", "triggers_lab.pytest_plugin"]
        full_env["PYTHONPATH"] = os.pathsep.join(
            p for p in [str(PYTHON_DIR), full_env.get("PYTHONPATH", "")] if p
        )
    if popen:
        return subprocess.Popen(argv, cwd=folder, env=full_env, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True, preexec_fn=_signals_as_a_terminal)
    return subprocess.run(argv, cwd=folder, env=full_env, capture_output=True, text=True,
                          timeout=timeout, preexec_fn=_signals_as_a_terminal)


def _signals_as_a_terminal():
    """The inner pytest takes Ctrl-C as it would at a terminal. A suite started as a background
    job of a non-interactive shell (``cmd &``, nohup) inherits SIGINT ignored, and Python then
    installs no KeyboardInterrupt handler: the test of an interrupted run would wait for ever."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


def processes_mentioning(text: str):
    """The pids of the processes whose command line mentions ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            continue
        if text in cmdline:
            found.append((int(entry.name), cmdline))
    return found


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie of ours counts as gone.
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1][0] != "Z"
    except (OSError, IndexError):
        return False


@pytest.fixture
def run_inner():
    return run_pytest
