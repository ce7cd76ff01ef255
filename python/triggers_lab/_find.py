"""Where the ``triggers-lab`` binary is: the one the wheel installed beside this package."""

from __future__ import annotations

import os
import shutil
import sys
import sysconfig
from pathlib import Path

from .errors import TriggersLabError

_EXE = "triggers-lab" + (".exe" if sys.platform == "win32" else "")


def find_triggers_lab() -> str:
    """``$TRIGGERS_LAB`` if set; else the binary in this environment's scripts folder (where pip
    put it); else the user scheme's; else ``triggers-lab`` on PATH."""
    given = os.environ.get("TRIGGERS_LAB")
    if given:
        return given
    candidates = [Path(sysconfig.get_path("scripts")) / _EXE]
    user_scheme = {"nt": "nt_user", "posix": "posix_user"}.get(os.name)
    if sys.platform == "darwin" and sys._framework:  # type: ignore[attr-defined]
        user_scheme = "osx_framework_user"
    if user_scheme:
        candidates.append(Path(sysconfig.get_path("scripts", scheme=user_scheme)) / _EXE)
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    on_path = shutil.which(_EXE)
    if on_path:
        return on_path
    raise TriggersLabError(
        "no triggers-lab binary: install the triggers-lab wheel (pip install triggers-lab), put "
        "triggers-lab on PATH, or set TRIGGERS_LAB=/path/to/triggers-lab"
    )
