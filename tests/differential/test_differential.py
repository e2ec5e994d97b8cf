"""The differential fidelity suite: every case on both control planes, compared (see harness.py).

One test per case: it passes when the normalised records are identical, or when they differ and the case
is listed in documented.py (the difference is explained in docs/local-cluster.md); the session ends with
``fidelity: N cases: I identical, D documented, X different``.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.differential import report
from tests.differential.cases import load_all
from tests.differential.documented import DOC, DOCUMENTED, anchors
from tests.differential.harness import CASES, Outcome, dump
from tests.differential.runner import Runner

load_all()

#: a case's outcome may take this long to arrive (it may be queued behind others)
WAIT = 600.0


@pytest.mark.parametrize("case_name", list(CASES))
def test_case(case_name: str, differential: Runner) -> None:
    outcome = differential.result(case_name, WAIT)
    _keep_report(case_name, outcome)
    if outcome.errors and set(outcome.errors) == {"kubernetes", "embedded"}:
        report.RUN.outcomes[case_name] = report.DIFFERENT
        pytest.fail(f"the case itself failed on both control planes:\n{outcome.errors['kubernetes']}")
    documented = DOCUMENTED.get(case_name)
    if outcome.identical:
        report.RUN.outcomes[case_name] = report.IDENTICAL
        if documented is not None:
            pytest.fail(
                f"{case_name} is listed as a documented difference (#{documented}) but both control planes now "
                "answer the same: remove it from documented.py and the paragraph from docs/local-cluster.md"
            )
        return
    if documented is not None:
        report.RUN.outcomes[case_name] = report.DOCUMENTED
        return
    report.RUN.outcomes[case_name] = report.DIFFERENT
    errors = "".join(f"\n{tier} raised:\n{text}" for tier, text in outcome.errors.items())
    pytest.fail(
        f"{case_name}: the control planes differ (steps {outcome.differing_steps()}):\n{outcome.diff()}{errors}"
    )


def _keep_report(name: str, outcome: Outcome) -> None:
    """With KUBEDL_DIFFERENTIAL_REPORT=<dir>: each case's two records and their diff, for reading at leisure."""
    folder = os.environ.get("KUBEDL_DIFFERENTIAL_REPORT")
    if not folder:
        return
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    verdict = "same" if outcome.identical else "diff"
    (out / f"{name}.{verdict}.txt").write_text(
        f"# {name} ({outcome.seconds:.1f} s)\n{outcome.diff() if not outcome.identical else ''}\n"
        f"# kubernetes\n{dump(outcome.real)}\n# embedded\n{dump(outcome.embedded)}\n"
        + "".join(f"\n# {tier} raised\n{text}" for tier, text in outcome.errors.items())
    )


def test_documented_differences_name_cases_and_paragraphs() -> None:
    load_all()
    found = anchors()
    missing = {name: anchor for name, anchor in DOCUMENTED.items() if anchor not in found}
    assert not missing, f"paragraphs missing from {DOC.name}: {missing}"
    unknown = sorted(set(DOCUMENTED) - set(CASES))
    assert not unknown, f"documented.py names cases that do not exist: {unknown}"


def test_enough_cases() -> None:
    load_all()
    assert len(CASES) >= 150, f"the suite has {len(CASES)} cases; the issue asks for at least 150"
