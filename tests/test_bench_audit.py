"""The real-plane benchmarks read kube-apiserver's audit log: requests counted once each, write latencies
and APF queueing read from the right fields (a wrong parse would report figures nobody measured)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.realplane import RealCluster, go_duration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0s", 0.0), ("100ns", 1e-7), ("450.6649ns", 4.506649e-7), ("12µs", 1.2e-5), ("1.5ms", 1.5e-3), ("2m3.5s", 123.5)],
)
def test_go_durations_are_read_in_seconds(text: str, seconds: float) -> None:
    assert go_duration(text) == pytest.approx(seconds)


def test_a_string_that_is_not_a_duration_is_refused() -> None:
    with pytest.raises(ValueError, match="not a Go duration"):
        go_duration("5 seconds")


def _event(audit_id: str, user: str, verb: str, stage: str, span: tuple[str, str], **annotations: str) -> str:
    received, done = span
    return json.dumps(
        {
            "auditID": audit_id,
            "stage": stage,
            "verb": verb,
            "user": {"username": user},
            "requestReceivedTimestamp": received,
            "stageTimestamp": done,
            "annotations": annotations,
        }
    )


def test_requests_and_write_latencies_come_from_each_request_once(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    before = _event("0", "me", "create", "ResponseComplete", ("2026-11-23T10:00:00.000000Z", "2026-11-23T10:00:00.1Z"))
    lines = [
        _event("1", "me", "create", "ResponseComplete", ("2026-11-23T10:00:01.000000Z", "2026-11-23T10:00:01.250000Z")),
        _event(
            "2",
            "me",
            "patch",
            "ResponseComplete",
            ("2026-11-23T10:00:02.000000Z", "2026-11-23T10:00:02.800000Z"),
            **{"apiserver.latency.k8s.io/apf-queue-wait": "600ms"},
        ),
        _event("3", "me", "watch", "ResponseStarted", ("2026-11-23T10:00:03.000000Z", "2026-11-23T10:00:03.01Z")),
        _event("3", "me", "watch", "ResponseComplete", ("2026-11-23T10:00:03.000000Z", "2026-11-23T10:05:03Z")),
        _event("4", "someone-else", "create", "ResponseComplete", ("2026-11-23T10:00:04Z", "2026-11-23T10:00:09Z")),
    ]
    log.write_text(before + "\n")
    cluster = RealCluster(tmp_path, {"audit_log": str(log)})
    mark = cluster.audit_mark()
    with log.open("a") as out:
        out.write("\n".join(lines) + "\n")

    assert cluster.requests("me", mark) == {"create": 1, "patch": 1, "watch": 1, "total": 3, "writes": 2}
    writes = sorted(cluster.write_latencies("me", mark))
    assert writes == [pytest.approx((0.25, 0.0)), pytest.approx((0.8, 0.6))]
