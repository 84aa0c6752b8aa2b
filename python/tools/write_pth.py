"""Writes autoshard.pth, naming the package root, into the user's site-packages.

Run by the build (python/CMakeLists.txt) so that `import autoshard` works from
any directory. Leaves the file alone when it already names this root.
"""

import os
import site
import sys


def main() -> int:
    root = os.path.abspath(sys.argv[1])
    target_dir = site.getusersitepackages()
    path = os.path.join(target_dir, "autoshard.pth")
    try:
        with open(path, encoding="utf-8") as f:
            if f.read().strip() == root:
                return 0
    except OSError:
        pass
    try:
        os.makedirs(target_dir, exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(root + "\n")
    except OSError as e:
        # Not fatal: PYTHONPATH=python works as well.
        print(f"autoshard: warning: could not write {path}: {e}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
