"""The Python conformance service (examples/conformance-python) tested with the fixture: a
success, a retry, a DLQ entry, a Durable Timer flow advanced an hour, and a conformance
violation expected on purpose (its CONFORM_BREAK knobs)."""

import sys
from pathlib import Path

import pytest

from triggers_lab import ControlError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "conformance-python"
FLOWS = EXAMPLE / "flows"


def start_conformance(lab, **env):
    lab.start_service([sys.executable, str(EXAMPLE / "service.py")], name="conformance", env=env)
    lab.wait_service("conformance")


def statuses(run, node):
    return [e["status"] for e in run["timeline"] if e["node_id"] == node]


def test_an_echo_succeeds(triggers_lab):
    start_conformance(triggers_lab)
    triggers_lab.deploy(FLOWS / "c-echo.yaml")
    run_id = triggers_lab.trigger("c-echo", {"a": 1})
    run = triggers_lab.wait_settled(run_id)
    assert run["status"] == "succeeded", run
    assert statuses(run, "echo") == ["succeeded"]
    assert triggers_lab.dlq(run_id) == []
    triggers_lab.assert_no_conformance_errors()


def test_a_flaky_action_is_retried_then_succeeds(triggers_lab):
    start_conformance(triggers_lab)
    triggers_lab.deploy(FLOWS / "c-flaky.yaml")
    run_id = triggers_lab.trigger("c-flaky", {"failures": 2})
    run = triggers_lab.wait_settled(run_id)
    assert run["status"] == "succeeded", run
    assert statuses(run, "flaky") == ["retrying", "retrying", "succeeded"]
    triggers_lab.assert_no_conformance_errors()


def test_an_action_that_keeps_failing_is_dead_lettered(triggers_lab):
    start_conformance(triggers_lab)
    triggers_lab.deploy(FLOWS / "c-flaky.yaml")
    run_id = triggers_lab.trigger("c-flaky", {"failures": 9})
    run = triggers_lab.wait_settled(run_id)
    assert run["status"] == "failed"
    assert run["failed"] == ["flaky"]
    [entry] = triggers_lab.wait_for_dlq(run_id, kind="action_failed")
    assert entry["subject"] == "triggers.v2.dlq.conformance.flaky"
    assert entry["entry"]["envelope"]["flow_run_id"] == run_id
    triggers_lab.assert_no_conformance_errors()


def test_a_durable_timer_flow_advanced_an_hour(triggers_lab):
    start_conformance(triggers_lab)
    triggers_lab.deploy(FLOWS / "c-timer.yaml")
    run_id = triggers_lab.trigger("c-timer", {"t": 1})
    # echo ran; the run waits on its one-hour timer, and nothing moves until the clock does.
    waiting = triggers_lab.wait_run(run_id, "waiting")
    assert "echo2" not in waiting["completed"]
    fired = triggers_lab.advance("1h")["fired"]
    assert [(f["run_id"], f["node_id"]) for f in fired] == [(run_id, "wait")]
    run = triggers_lab.wait_settled(run_id)
    assert run["status"] == "succeeded", run
    assert statuses(run, "echo2") == ["succeeded"]
    triggers_lab.assert_no_conformance_errors()


def test_a_broken_heartbeat_is_a_conformance_error(triggers_lab):
    # CONFORM_BREAK=conformant: every heartbeat carries a field outside its shape.
    start_conformance(triggers_lab, CONFORM_BREAK="conformant")
    violation = triggers_lab.wait_for_violation("unknown_field")
    assert violation["severity"] == "error"
    assert violation["subject"] == "triggers.v2.heartbeat"
    with pytest.raises(AssertionError, match="unknown_field"):
        triggers_lab.assert_no_conformance_errors()


def test_a_refused_release_carries_its_problems(triggers_lab):
    start_conformance(triggers_lab)
    flow = {
        "id": "bad",
        "nodes": [
            {"id": "in", "type": "service-in", "service": "conformance"},
            {"id": "x", "type": "action", "service": "conformance", "action": "nope"},
        ],
        "edges": [{"id": "e1", "from": "in", "to": "x"}],
    }
    with pytest.raises(ControlError) as refused:
        triggers_lab.deploy(flow)
    assert "release refused" in refused.value.message
    assert [(p["code"], p.get("node")) for p in refused.value.problems] == [("unknown_action", "x")]


def test_a_refused_flow_file_carries_its_problems(triggers_lab, tmp_path):
    start_conformance(triggers_lab)
    flow = tmp_path / "bad.yaml"
    flow.write_text(
        "id: bad\n"
        "nodes:\n"
        "  - {id: in, type: service-in, service: conformance}\n"
        "  - {id: x, type: action, service: conformance, action: nope}\n"
        "edges:\n"
        "  - {id: e1, from: in, to: x}\n"
    )
    with pytest.raises(ControlError) as refused:
        triggers_lab.deploy(flow)
    assert "unknown_action" in refused.value.message
    assert [(p["code"], p.get("node")) for p in refused.value.problems] == [("unknown_action", "x")]
    # A key the flow format does not have is refused at its line, before the emulator sees it.
    flow.write_text(flow.read_text().replace("edges:", "edgs:"))
    with pytest.raises(ControlError, match=r"bad.yaml:5:1: .*unknown key `edgs`") as refused:
        triggers_lab.deploy(flow)
    assert refused.value.problems == []
