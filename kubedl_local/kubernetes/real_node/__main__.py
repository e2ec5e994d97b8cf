"""``python -m kubedl_local.kubernetes.real_node``: build (or find) the real node's programs; print where they are.

``make node-binaries`` runs this (and ``make test-node`` before its tests), so the first build's progress
shows in the terminal and a failure ends with one message naming the fix instead of a traceback.
"""

from __future__ import annotations

import sys

from kubedl_local.kubernetes.binaries import BuildError
from kubedl_local.kubernetes.real_node.binaries import ensure_node_binaries


def main() -> int:
    try:
        found = ensure_node_binaries()
    except BuildError as exc:
        print(f"kubedl-py: {exc}", file=sys.stderr)
        return 1
    for path in found.all():
        print(f"kubedl-py: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
