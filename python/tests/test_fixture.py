"""The fixture itself: a failing test's report names the run's timeline, the violations and the
logs; nothing is left behind after a passing or failing test, nor after Ctrl-C or SIGTERM."""

import json
import signal
import textwrap
import time
from pathlib import Path

import pytest

from conftest import pid_alive, processes_mentioning, run_pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "conformance-python"

# An inner test: the conformance service with a break (its heartbeats carry a field outside their
# shape: the checker's `unknown_field`),
# a run of c-echo, what the lab started written down, then `BEHAVIOUR`.
INNER = textwrap.dedent(
    '''
    import json, os, sys, time

    def test_inner(triggers_lab):
        service = triggers_lab.start_service(
            [sys.executable, {service!r}], name="conformance", env={{"CONFORM_BREAK": "conformant"}})
        triggers_lab.wait_service("conformance")
        triggers_lab.deploy({flow!r})
        run_id = triggers_lab.trigger("c-echo", {{"a": 1}})
        triggers_lab.wait_settled(run_id)
        triggers_lab.wait_for_violation("unknown_field")
        with open("lab.json.tmp", "w") as f:
            json.dump({{"workdir": str(triggers_lab.workdir), "up": triggers_lab.up.pid,
                        "service": service.pid, "run_id": run_id, "url": triggers_lab.url,
                        "instance": triggers_lab.instance}}, f)
        os.rename("lab.json.tmp", "lab.json")
        {behaviour}
    '''
)


def write_inner(folder: Path, behaviour: str) -> None:
    (folder / "test_inner.py").write_text(
        INNER.format(
            service=str(EXAMPLE / "service.py"),
            flow=str(EXAMPLE / "flows" / "c-echo.yaml"),
            behaviour=behaviour,
        )
    )


def assert_nothing_left(lab: dict) -> None:
    assert not pid_alive(lab["up"]), "triggers-lab up outlived the test"
    assert not pid_alive(lab["service"]), "the service outlived the test"
    # The nats-server's store, config and log were in the lab's folder: no process names it.
    assert processes_mentioning(lab["workdir"]) == []
    assert not Path(lab["workdir"]).exists(), "the lab's folder was left behind"
    # Nor any other lab of that pytest (the spare started for a next test).
    workdir = Path(lab["workdir"])
    prefix = workdir.name.split(lab["instance"], 1)[0] + lab["instance"].rsplit("-", 1)[0] + "-"
    assert processes_mentioning(str(workdir.parent / prefix)) == []
    assert sorted(p.name for p in workdir.parent.glob(prefix + "*")) == []


def test_a_failing_test_names_the_timeline_the_violations_and_the_logs(tmp_path):
    write_inner(tmp_path, "assert False, 'on purpose'")
    done = run_pytest(tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    lab = json.loads((tmp_path / "lab.json").read_text())
    out = done.stdout
    assert "on purpose" in out
    # The run's timeline, as a failing scenario shows it.
    assert "triggers-lab runs" in out
    assert f"run {lab['run_id']} of flow c-echo v1: status succeeded" in out
    assert [line.split()[1:] for line in out.splitlines() if line.strip().startswith("#") and " echo " in line] == [
        ["echo", "action", "conformance", "succeeded"]
    ]
    # The violations (the break's), and the logs of up and of the service.
    assert "triggers-lab violations" in out
    assert [l.split()[:4] for l in out.splitlines() if l.startswith("  ERROR")][:1] == [
        ["ERROR", "unknown_field", "on", "triggers.v2.heartbeat:"]
    ]
    assert f"triggers-lab up log" in out and lab["url"] in out
    assert "service conformance log" in out
    assert_nothing_left(lab)


@pytest.mark.parametrize("spare", ["true", "false"], ids=["spare", "no-spare"])
def test_a_passing_test_leaves_nothing(tmp_path, spare):
    write_inner(tmp_path, "pass")
    done = run_pytest(tmp_path, "-o", f"triggers_lab_spare={spare}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "triggers-lab runs" not in done.stdout
    assert_nothing_left(json.loads((tmp_path / "lab.json").read_text()))


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_an_interrupted_run_leaves_nothing(tmp_path, sig):
    write_inner(tmp_path, "time.sleep(300)")
    inner = run_pytest(tmp_path, popen=True)
    try:
        deadline = time.monotonic() + 120
        while not (tmp_path / "lab.json").exists():
            assert inner.poll() is None, inner.communicate()[0]
            assert time.monotonic() < deadline, "the inner test never got its lab up"
            time.sleep(0.05)
        inner.send_signal(sig)
        inner.wait(timeout=60)
    finally:
        if inner.poll() is None:
            inner.kill()
            inner.wait()
    assert inner.returncode != 0
    assert_nothing_left(json.loads((tmp_path / "lab.json").read_text()))


def test_ini_options_reach_up(tmp_path):
    # --auto-advance: the virtual clock jumps to the next timer whenever every run is idle.
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\ntriggers_lab_up_args = --auto-advance\ntriggers_lab_timeout = 20\n"
    )
    (tmp_path / "test_timer.py").write_text(textwrap.dedent(f'''
        import sys

        def test_the_timer_fires_by_itself(triggers_lab):
            assert triggers_lab.timeout == 20
            triggers_lab.start_service([sys.executable, {str(EXAMPLE / "service.py")!r}])
            triggers_lab.wait_service("conformance")
            triggers_lab.deploy({str(EXAMPLE / "flows" / "c-timer.yaml")!r})
            run = triggers_lab.wait_settled(triggers_lab.trigger("c-timer", {{"t": 1}}))
            assert run["status"] == "succeeded"
            assert "echo2" in run["completed"]
    '''))
    done = run_pytest(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
