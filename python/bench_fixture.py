"""What the `triggers_lab` fixture costs a test (docs/benchmarks.md, "The Python fixture").

    python python/bench_fixture.py [N]

Times, N times in a row: a `Lab` started (`triggers-lab up --port 0` until its control API
answers) and closed (services, then `up` and its nats-server, stopped; its folder removed); and
a whole test as a user writes one: the lab, the conformance service started and registered, a
one-step flow deployed, triggered and settled, everything stopped. Prints the medians.
"""

import statistics
import sys
import time
from pathlib import Path

from triggers_lab import Lab

SERVICE = Path(__file__).resolve().parents[1] / "examples" / "conformance-python" / "service.py"
ECHO = {
    "id": "echo-flow",
    "nodes": [
        {"id": "in", "type": "service-in", "service": "conformance"},
        {"id": "echo", "type": "action", "service": "conformance", "action": "echo"},
    ],
    "edges": [{"id": "e1", "from": "in", "to": "echo"}],
}


def one(with_service: bool) -> dict:
    t = {}
    t0 = time.perf_counter()
    lab = Lab.start()
    t["start"] = time.perf_counter() - t0
    try:
        if with_service:
            t1 = time.perf_counter()
            lab.start_service([sys.executable, str(SERVICE)])
            lab.wait_service("conformance")
            t["service"] = time.perf_counter() - t1
            t2 = time.perf_counter()
            lab.deploy(ECHO)
            run = lab.wait_settled(lab.trigger("echo-flow", {"a": 1}))
            assert run["status"] == "succeeded", run
            t["run"] = time.perf_counter() - t2
    finally:
        t3 = time.perf_counter()
        lab.close()
        t["close"] = time.perf_counter() - t3
    t["whole"] = time.perf_counter() - t0
    return t


TEST = """
import sys

def test_{i}(triggers_lab):
    if {with_service}:
        triggers_lab.start_service([sys.executable, {service!r}])
        triggers_lab.wait_service("conformance")
        triggers_lab.deploy({flow!r})
        run = triggers_lab.wait_settled(triggers_lab.trigger("echo-flow", {{"a": 1}}))
        assert run["status"] == "succeeded"
"""


def session(n: int, with_service: bool, spare: bool) -> float:
    """Wall time of a pytest session of n such tests, over n (pytest's own start excluded: a
    session of one empty test is taken off)."""
    import os
    import subprocess
    import tempfile

    def run(count: int, body: bool) -> float:
        with tempfile.TemporaryDirectory() as d:
            for i in range(count):
                Path(d, f"test_{i}.py").write_text(TEST.format(
                    i=i, with_service=body, service=str(SERVICE), flow=ECHO))
            argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                    "-o", f"triggers_lab_spare={'true' if spare else 'false'}"]
            if os.environ.get("TRIGGERS_LAB_BENCH_PLUGIN"):
                argv += ["-p", "triggers_lab.pytest_plugin"]
            t0 = time.perf_counter()
            subprocess.run(argv, cwd=d, check=True, capture_output=True)
            return time.perf_counter() - t0

    return (run(n, with_service) - run(1, False)) / (n - 1)


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    for with_service in (False, True):
        samples = [one(with_service) for _ in range(n)]
        label = "whole test (service, flow, run)" if with_service else "fixture alone"
        parts = ", ".join(
            f"{k} {statistics.median(s[k] for s in samples) * 1000:.1f} ms" for k in samples[0]
        )
        print(f"Lab, {label}, median of {n}: {parts}")
    for with_service in (False, True):
        for spare in (False, True):
            per = session(n, with_service, spare)
            label = "whole test" if with_service else "fixture alone"
            print(f"pytest session, {label}, spare {'on' if spare else 'off'}: "
                  f"{per * 1000:.1f} ms a test ({n} tests)")


if __name__ == "__main__":
    main()
