"""``python -m kubedl_py.local.protobuf``: build (or find) the protobuf field table; print where it is.

``make test`` runs this first, so a fresh machine fetches the table once before any test needs it and an
offline machine learns so in one line instead of from 415s.
"""

from __future__ import annotations

import sys

from .table import TableUnavailable, ensure_table, table_path


def main() -> int:
    try:
        table = ensure_table()
    except TableUnavailable as exc:
        print(f"kubedl-py: {exc}", file=sys.stderr)
        return 1
    print(f"kubedl-py: protobuf table of {len(table['kinds'])} kinds in {table_path()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
