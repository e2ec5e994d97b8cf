"""The real-plane benchmarks read kube-apiserver's audit log: requests counted once each, write latencies
and APF queueing read from the right fields (a wrong parse would report figures nobody measured)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.real_failover import audit_split
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


def _on(
    audit_id: str,
    user: str,
    verb: str,
    span: tuple[float, float],
    *,
    name: str = "fo-master-0",
    resource: str = "pods",
) -> dict[str, object]:
    """An audit event on ``name`` received and completed ``span`` seconds after 10:00:00."""

    def at(seconds: float) -> str:
        return f"2026-11-23T10:00:{seconds:09.6f}Z"

    return {
        "auditID": audit_id,
        "stage": "ResponseComplete",
        "verb": verb,
        "user": {"username": user},
        "objectRef": {"resource": resource, "name": name},
        "responseStatus": {"code": 200},
        "requestReceivedTimestamp": at(span[0]),
        "stageTimestamp": at(span[1]),
    }


def test_traced_requests_are_every_users_on_that_name_in_the_order_received(tmp_path: Path) -> None:
    log = tmp_path / "audit.log"
    events = [
        _on("b", "node", "delete", (2.0, 2.1)),
        _on("a", "bench", "delete", (1.0, 1.1)),
        _on("c", "ctl", "patch", (3.0, 3.1), name="other"),
    ]
    log.write_text("\n".join(json.dumps(e) for e in events) + "\n")
    traced = RealCluster(tmp_path, {"audit_log": str(log)}).traced("fo-master-0", 0)
    assert [e["auditID"] for e in traced] == ["a", "b"]


def test_a_failover_splits_into_the_controllers_reaction_and_its_writes() -> None:
    events = [
        _on("0", "ctl", "create", (0.0, 0.1)),  # the first pod: no deletion before it, not a failover
        # failover 1: the benchmark deletes, the node agent removes the pod at 2.0, the controller writes twice
        _on("1", "bench", "delete", (1.0, 1.05)),
        _on("2", "node", "delete", (1.9, 2.0)),
        _on("3", "ctl", "patch", (2.3, 2.4)),
        _on("4", "ctl", "create", (2.45, 2.7)),
        _on("5", "bench", "get", (2.8, 2.81)),
        # failover 2: the pod was not on a node yet, the benchmark's own delete removes it
        _on("6", "bench", "delete", (3.0, 3.2)),
        _on("7", "ctl", "patch", (3.25, 3.3)),
        _on("8", "ctl", "create", (3.3, 3.5)),
        # failover 3: the Service is re-pointed while the old pod terminates; only the create follows its end
        _on("9", "bench", "delete", (4.0, 4.1)),
        _on("10", "ctl", "patch", (4.2, 4.3), resource="services"),
        _on("11", "node", "delete", (4.5, 4.6)),
        _on("12", "ctl", "create", (4.7, 4.9)),
        # a deletion the controller never answered is no failover of the split
        _on("13", "bench", "delete", (5.0, 5.1)),
        _on("14", "ctl", "patch", (5.2, 5.3), resource="services"),
    ]
    split = audit_split(events, "ctl")
    assert split["reaction"] == pytest.approx([0.3, 0.05, 0.1], abs=1e-5)
    assert split["repair"] == pytest.approx([0.4, 0.25, 0.2], abs=1e-5)
