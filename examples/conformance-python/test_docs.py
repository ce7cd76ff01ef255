"""Self-test against the documents: every expression example of docs/flows.md evaluates here as
the page says, and every hop and output key recipe of docs/wire.md is what this service writes.

    python3 examples/conformance-python/test_docs.py
"""

import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.pop("CONFORM_BREAK", None)

import flowexpr  # noqa: E402
import service  # noqa: E402

DOCS = os.path.join(HERE, "..", "..", "docs")


def read(name):
    with open(os.path.join(DOCS, name), encoding="utf-8") as f:
        return f.read()


def flows_examples():
    failures, seen = 0, 0
    for kind, text in re.findall(r"<!-- doc-example: (\w+) -->\n```json\n(.*?)```", read("flows.md"), re.S):
        v = json.loads(text)
        if kind == "mapping":
            seen += 1
            got = flowexpr.mapping(v["config"], v["input"])
            if got != v["output"]:
                failures += 1
                print(f"flows.md mapping {v['config']}: got {got}, the page says {v['output']}")
        elif kind == "condition":
            for config, want in v["cases"]:
                seen += 1
                try:
                    got = flowexpr.condition(config, v["input"])
                except flowexpr.ExprError:
                    got = "error"
                if got != want:
                    failures += 1
                    print(f"flows.md condition {config}: got {got}, the page says {want}")
    return failures, seen


def wire_recipes():
    failures, seen = 0, 0
    for kind, text in re.findall(r"```recipe (\w+)\n(.*?)```", read("wire.md"), re.S):
        if kind not in ("hop", "output"):
            continue
        seen += 1
        r = dict(line.split(":", 1) for line in text.strip().splitlines())
        r = {k.strip(): v.strip() for k, v in r.items()}
        trail = [e.strip() for e in r["trail"].split(",") if e.strip()]
        if kind == "hop":
            key = f"{r['run']}:{r['from']}>{r['service']}:{service.digest(r['inbound_key'], trail, r['service'])}"
        else:
            key = f"{r['run']}:{r['node']}:{service.digest(r['inbound_key'], trail, '')}"
        if key != r["key"]:
            failures += 1
            print(f"wire.md {kind} recipe: got {key}, the page says {r['key']}")
    return failures, seen


def main():
    f1, n1 = flows_examples()
    f2, n2 = wire_recipes()
    if n1 < 10 or n2 < 3:
        print(f"the pages' examples went missing ({n1} expression cases, {n2} key recipes)")
        return 1
    print(f"{n1} expression cases, {n2} key recipes: {f1 + f2} failure(s)")
    return 1 if f1 + f2 else 0


if __name__ == "__main__":
    sys.exit(main())
