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


def test_the_dated_run_report_shows_only_the_newest_runs_entries_and_counts_rounds_won() -> None:
    from bench.report import dated_run

    def rounds(*pairs: tuple[float, float]) -> list[dict[str, object]]:
        return [{"exist_seconds": exist, "all_pods_running_seconds": running} for exist, running in pairs]

    def entry(run: dict[str, str], ours: list[dict[str, object]], theirs: list[dict[str, object]]) -> dict[str, object]:
        runs = {"bare-client": [{"exist_seconds": 10.0, "requests": {"total": 90}}] * 3, "kubedl-py": ours}
        runs["kubedl-tuned"] = theirs
        return {"run": run, "jobs": 10, "replicas": 8, "nodes": 5, "summary": summarise(runs), "runs": runs}

    old = {"started": "2026-11-27T10:00:00+00:00", "commit": "aaa", "benchmarks": []}
    new = {"started": "2026-11-28T10:00:00+00:00", "commit": "bbb", "benchmarks": []}
    results = {
        "real_n200_before": entry(old, rounds((1, 1), (1, 1), (1, 1)), rounds((9, 9), (9, 9), (9, 9))),
        "real_n200": entry(new, rounds((11, 20), (12, 21), (13, 30)), rounds((14, 19), (10, 22), (15, 31))),
        "unstamped": {"summary": {}},
    }
    text = "\n".join(dated_run(results))
    assert "commit bbb" in text and "real_n200_before" not in text and "unstamped" not in text
    # exist: 11<14, 12>10, 13<15 -> 2 of 3; running: 20>19, 21<22, 30<31 -> 2 of 3
    assert "existed first in 2 of 3 rounds, its pods all ran first in 2 of 3" in text
    assert "| kubedl-py | 3 | 12.00 s (11.00-13.00) | 1.20 (1.10-1.30) | 21.00 s (20.00-30.00) |" in text
    assert dated_run({"unstamped": {"summary": {}}}) == []


def test_the_master_first_bare_client_makes_services_and_masters_then_each_jobs_workers_after_its_master() -> None:
    from bench.bench_controller import same_objects
    from bench.real_controller import staged

    objects = same_objects(3, 4, "bench")
    first, later = staged(objects)
    pods_first = sorted(body["metadata"]["name"] for kind, body in first if kind == "pods")
    assert pods_first == ["job-0-master-0", "job-1-master-0", "job-2-master-0"]
    assert sum(1 for kind, _ in first if kind == "services") == sum(1 for kind, _ in objects if kind == "services")
    assert sorted(later) == pods_first
    assert [body["metadata"]["name"] for _, body in later["job-1-master-0"]] == [
        "job-1-worker-0",
        "job-1-worker-1",
        "job-1-worker-2",
    ]
    assert len(first) + sum(len(items) for items in later.values()) == len(objects)  # nothing lost, nothing twice
