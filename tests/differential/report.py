"""The suite's count: every case's outcome, the line printed at the end of the session, and its verdict.

Why a module of its own: the per-case tests record outcomes here and the session hooks in conftest.py read
them, so the count and the threshold live in one place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tests.differential.runner import Runner

IDENTICAL = "identical"
DOCUMENTED = "documented"
DIFFERENT = "different"

#: the share of cases that must be identical when the whole suite runs
THRESHOLD = 0.95


@dataclass
class Run:
    outcomes: dict[str, str] = field(default_factory=dict)
    runner: Runner | None = None

    def counts(self) -> tuple[int, int, int]:
        values = list(self.outcomes.values())
        return values.count(IDENTICAL), values.count(DOCUMENTED), values.count(DIFFERENT)

    def summary(self) -> str:
        if not self.outcomes:
            return ""
        identical, documented, different = self.counts()
        took = f" in {self.runner.seconds:.0f} s" if self.runner is not None else ""
        return (
            f"fidelity: {len(self.outcomes)} cases: {identical} identical, {documented} documented, "
            f"{different} different{took}"
        )

    def verdict(self, total: int) -> str:
        """Why the run fails ('' when it does not): an undocumented difference, or, when every case ran,
        fewer than THRESHOLD of them identical."""
        if not self.outcomes:
            return ""
        identical, _, different = self.counts()
        if different:
            return f"{different} case(s) differ without a documented reason"
        if len(self.outcomes) == total and identical < THRESHOLD * total:
            return f"only {identical} of {total} cases are identical (at least {THRESHOLD:.0%} must be)"
        return ""


RUN = Run()
