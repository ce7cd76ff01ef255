"""docs/python.md is a test: its complete example runs as a test file, and the commands it shows
for installing are the ones .ci/run runs."""

import re
import shutil
from pathlib import Path

from conftest import run_pytest

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "python.md"


def blocks(marker: str):
    """The fenced blocks of the page, each with the HTML comment on the line before it."""
    lines = PAGE.read_text().splitlines()
    out, i = [], 0
    while i < len(lines):
        if lines[i].startswith("```") and lines[i] != "```":
            comment = lines[i - 1] if i else ""
            j = i + 1
            while lines[j] != "```":
                j += 1
            if marker in comment:
                out.append((comment, lines[i + 1 : j]))
            i = j
        i += 1
    return out


def test_the_complete_test_passes(tmp_path):
    [(comment, body)] = blocks("python-test:")
    name = re.search(r"python-test:\s*(\S+)", comment).group(1)
    (tmp_path / name).write_text("\n".join(body) + "\n")
    shutil.copy(REPO / "examples" / "conformance-python" / "service.py", tmp_path)
    for helper in ("gowire.py", "flowexpr.py"):
        shutil.copy(REPO / "examples" / "conformance-python" / helper, tmp_path)
    done = run_pytest(tmp_path, "-v")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "2 passed" in done.stdout


def test_the_install_commands_are_the_ones_ci_runs():
    [(_, commands)] = [b for b in blocks("not checked: .ci/run runs these") if b]
    ci = (REPO / ".ci" / "run").read_text().splitlines()
    ci = [line.strip() for line in ci]
    missing = [c for c in commands if c.strip() not in ci]
    assert missing == [], f".ci/run does not run these commands of docs/python.md: {missing}"
    # In the page's order.
    assert [ci.index(c.strip()) for c in commands] == sorted(ci.index(c.strip()) for c in commands)
