"""The differences the suite knows about: case name -> the paragraph of docs/local-cluster.md saying why.

One table, checked against the document (tests/differential/test_differential.py): every anchor named here
must exist there, so the suite and the documentation cannot drift apart. A case listed here whose outcomes
become identical fails, so the table (and the paragraph) go when the difference is fixed.
"""

from __future__ import annotations

import re
from pathlib import Path

DOC = Path(__file__).resolve().parents[2] / "docs" / "local-cluster.md"

#: case name -> anchor (``<a id="..."></a>``) of the paragraph in docs/local-cluster.md
DOCUMENTED: dict[str, str] = {
    "kubectl-api-resources-core": "served-kinds",
    "kubectl-api-versions": "served-kinds",
    "discovery-core-all-kinds": "served-kinds",
    "kubectl-explain-deployment": "served-kinds",
    "kubectl-patch-strategic-pod": "pod-update-diff",
    "http-patch-json-array-ops": "pod-update-diff",
    "kubectl-auth-can-i-as-serviceaccount": "no-authorization",
    "kubectl-auth-whoami": "no-authentication",
}

_ANCHOR = re.compile(r'<a id="([\w-]+)"></a>')


def anchors(text: str | None = None) -> set[str]:
    return set(_ANCHOR.findall(DOC.read_text() if text is None else text))
