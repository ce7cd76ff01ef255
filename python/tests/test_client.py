"""The client on its own: durations, discovery, and its ops against the server's."""

import re

import pytest

from triggers_lab import ControlClient, ControlError, Discovery, duration_ms
from triggers_lab.client import CLIENT_OPS
from triggers_lab.types import OPS


@pytest.mark.parametrize(
    "text, ms",
    [("250ms", 250), ("30s", 30_000), ("5m", 300_000), ("1h", 3_600_000), ("1d", 86_400_000),
     ("1h30m", 5_400_000), ("90", 90_000), (1.5, 1500), ("2h 5m", 7_500_000)],
)
def test_durations(text, ms):
    assert duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "1x", "h", "-1s", "1h junk"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        duration_ms(text)


def test_the_client_has_a_method_for_every_op():
    assert sorted(CLIENT_OPS) == sorted(OPS)


def test_the_ops_are_the_servers(triggers_lab):
    # The server lists its ops when asked for one it does not know.
    with pytest.raises(ControlError) as unknown:
        triggers_lab.client.request("frobnicate")
    served = re.search(r"ops: (.*)$", unknown.value.message).group(1).split(", ")
    assert sorted(served) == sorted(OPS)


def test_a_client_finds_the_up_by_its_instance_name(triggers_lab):
    found = Discovery.find(instance=triggers_lab.instance)
    assert found.url == triggers_lab.url and found.token
    with ControlClient(triggers_lab.instance) as client:
        state = client.state()
        assert state["clock_mode"] == "virtual"
        assert client.advance("90s")["fired"] == []
    # A wrong token is refused, with the API's message.
    found.token = "not-the-token"
    with ControlClient(discovery=found) as client, pytest.raises(ControlError, match="token"):
        client.state()


def test_the_package_runs_its_binary():
    import os
    import subprocess
    import sys
    import sysconfig
    from pathlib import Path

    from conftest import INSTALLED
    from triggers_lab import find_triggers_lab

    done = subprocess.run([sys.executable, "-m", "triggers_lab", "--version"],
                          capture_output=True, text=True, check=True)
    assert done.stdout.startswith("triggers-lab ")
    if INSTALLED and "TRIGGERS_LAB" not in os.environ:
        # pip put the binary in this environment's scripts folder, beside python.
        assert Path(find_triggers_lab()) == Path(sysconfig.get_path("scripts")) / "triggers-lab"
