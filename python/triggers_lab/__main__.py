"""``python -m triggers_lab ...`` runs the ``triggers-lab`` binary with these arguments."""

import os
import sys

from ._find import find_triggers_lab


def main() -> None:
    binary = find_triggers_lab()
    if sys.platform == "win32":
        import subprocess

        sys.exit(subprocess.call([binary, *sys.argv[1:]]))
    os.execvp(binary, [binary, *sys.argv[1:]])


if __name__ == "__main__":
    main()
