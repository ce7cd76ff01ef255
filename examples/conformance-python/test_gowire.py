"""Self-test of the wire bytes against the repository's golden files (testdata/).

    python3 examples/conformance-python/test_gowire.py
"""

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gowire  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata")


def main():
    failures = 0
    base = os.path.join(ROOT, "manifests")
    cases = sorted(os.listdir(base))
    for d in cases:
        p = os.path.join(base, d)
        with open(os.path.join(p, "manifest.json"), "rb") as f:
            m = gowire.decode(f.read())
        with open(os.path.join(p, "canonical.json"), "rb") as f:
            want = f.read().rstrip(b"\n")
        with open(os.path.join(p, "hash.txt")) as f:
            want_hash = f.read().strip()
        got = gowire.canonical_manifest(m)
        if got != want or gowire.manifest_hash(m) != want_hash:
            failures += 1
            print(f"manifest {d}: got {got[:200]!r}")
    with open(os.path.join(ROOT, "time", "cases.json")) as f:
        times = json.load(f)
    for c in times:
        try:
            if "unix_ns" in c:
                got = gowire.go_time_ns(c["unix_ns"])
            else:
                got = gowire.parse_time(c["input"]).text()
        except ValueError as e:
            got = f"error: {e}"
        if got != c.get("expected"):
            failures += 1
            print(f"time {c}: got {got!r}")
    nums = {2.0: "2", 1e21: "1e+21", 1e20: "100000000000000000000", 1e-7: "1e-7", -0.0: "-0",
            float(9007199254740993): "9007199254740992", 0.000001: "0.000001", 1.5e-7: "1.5e-7"}
    for f, want in nums.items():
        if gowire.go_float(f) != want:
            failures += 1
            print(f"number {f!r}: got {gowire.go_float(f)!r}, want {want!r}")
    s = gowire.encode("<&> \u2028\u2029 \n\t\b\f \x01 \x7f /")
    if s != '"<&> \\u2028\\u2029 \\n\\t\\b\\f \\u0001 \x7f /"'.encode():
        failures += 1
        print(f"string: got {s!r}")
    print(f"{len(cases)} manifests, {len(times)} times: {failures} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
