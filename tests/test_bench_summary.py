"""The real-plane throughput summary: ratios per round to that round's bare client, and contenders that were
chosen but given no round (``--shipped-runs 0`` for the peers at shipped limits) left out, not a crash at the
end of a 30-minute run."""

from __future__ import annotations

import pytest

from bench.real_controller import summarise


def test_ratios_are_per_round_and_a_contender_without_rounds_is_left_out() -> None:
    runs = {
        "bare-client": [{"exist_seconds": 100.0}, {"exist_seconds": 120.0}],
        "kubedl-py": [{"exist_seconds": 110.0}, {"exist_seconds": 126.0}],
        "kubedl": [],
    }
    summary = summarise(runs)
    assert set(summary) == {"bare-client", "kubedl-py"}
    assert summary["kubedl-py"]["runs"] == 2
    assert summary["kubedl-py"]["ratio_to_bare_min"] == pytest.approx(1.05)
    assert summary["kubedl-py"]["ratio_to_bare_max"] == pytest.approx(1.1)
    assert summary["kubedl-py"]["exist_seconds_median"] == pytest.approx(118.0)
