"""``python -m kubedl_local.sources``: fetch (or find) what the embedded API server reads from the pinned
Kubernetes release: the protobuf field table of the built-in kinds and their OpenAPI v3 documents.

``make test`` runs this first, so a fresh machine fetches them once before any test needs them, and an
offline machine learns so in one line instead of from 415s and schema-less documents.
"""

from __future__ import annotations

import sys

from kubedl_local.apiserver import openapi
from kubedl_local.apiserver.protobuf.table import TableUnavailable, ensure_table, table_path


def main() -> int:
    failed = False
    try:
        table = ensure_table()
        print(f"kubedl-py: protobuf table of {len(table['kinds'])} kinds in {table_path()}")
    except TableUnavailable as exc:
        print(f"kubedl-py: {exc}", file=sys.stderr)
        failed = True
    try:
        docs = openapi.ensure_specs()
        print(f"kubedl-py: {len(docs)} OpenAPI v3 documents in {openapi.specs_dir()}")
    except openapi.SpecsUnavailable as exc:
        print(f"kubedl-py: {exc}", file=sys.stderr)
        failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
