"""Which failures the ExitCode policy retries."""

from __future__ import annotations

from typing import Any

import pytest

from kubedl_py.controllers.failures.classes import MAX_MESSAGE, classify, in_place_failure


def failed_pod(
    exit_code: int | None = None, reason: str | None = None, pod_reason: str | None = None
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": "Failed"}
    if pod_reason:
        status["reason"] = pod_reason
    if exit_code is not None:
        terminated: dict[str, Any] = {"exitCode": exit_code}
        if reason:
            terminated["reason"] = reason
        status["containerStatuses"] = [{"name": "tensorflow", "state": {"terminated": terminated}}]
    return {"status": status}


# Every exit by a signal (128 + n), as the Training Operator: 134 is SIGABRT from the NCCL watchdog, 139 SIGSEGV.
@pytest.mark.parametrize("code", [128, 130, 134, 137, 138, 139, 143, 255])
def test_signal_exit_codes_are_retryable(code: int) -> None:
    failure = classify(failed_pod(code), "tensorflow")
    assert failure.retryable
    assert failure.exit_code == code


@pytest.mark.parametrize("code", [1, 2, 126, 127])
def test_program_errors_are_not(code: int) -> None:
    failure = classify(failed_pod(code, "Error"), "tensorflow")
    assert not failure.retryable
    assert f"exited with code {code}" in failure.description


def test_oom_and_eviction_are_retryable() -> None:
    assert classify(failed_pod(1, "OOMKilled"), "tensorflow").retryable
    evicted = classify(failed_pod(pod_reason="Evicted"), "tensorflow")
    assert evicted.retryable
    assert evicted.reason == "Evicted"


# ---------------------------------------------------------------------------------------------- classes


def disrupted(reason: str, phase: str = "Running") -> dict[str, Any]:
    condition = {"type": "DisruptionTarget", "status": "True", "reason": reason, "message": "evicting"}
    return {"status": {"phase": phase, "conditions": [condition]}}


@pytest.mark.parametrize(
    "pod_reason", ["Evicted", "Preempting", "NodeLost", "UnexpectedAdmissionError", "OutOfcpu", "OutOfnvidia.com/gpu"]
)
def test_the_cluster_ending_a_pod_is_an_infrastructure_failure(pod_reason: str) -> None:
    failure = classify(failed_pod(137, pod_reason=pod_reason), "tensorflow")
    assert failure.failure_class == "Infrastructure" and failure.infrastructure and failure.retryable
    assert failure.reason == pod_reason


@pytest.mark.parametrize("reason", ["PreemptionByScheduler", "EvictionByEvictionAPI", "DeletionByTaintManager"])
def test_a_disruption_target_is_an_infrastructure_failure(reason: str) -> None:
    failure = classify(disrupted(reason), "tensorflow")
    assert (failure.failure_class, failure.reason) == ("Infrastructure", reason)


@pytest.mark.parametrize(("code", "reason"), [(1, "Error"), (137, "Error"), (137, "OOMKilled"), (2, "Error")])
def test_the_programs_own_end_is_a_user_failure(code: int, reason: str) -> None:
    failure = classify(failed_pod(code, reason), "tensorflow")
    assert failure.failure_class == "User" and not failure.infrastructure
    assert failure.exit_code == code
    assert failure.signal == (code - 128 if code > 128 else None)


def test_the_termination_message_is_kept_bounded_from_its_end() -> None:
    pod = failed_pod(1, "Error")
    long = "".join(f"line {n}\n" for n in range(1000))
    pod["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = long
    message = classify(pod, "tensorflow").message
    assert message is not None and len(message) == MAX_MESSAGE
    assert message.endswith("line 999") and message.startswith("...")


def test_an_in_place_restart_is_a_user_failure_of_the_run_before() -> None:
    last = {"terminated": {"exitCode": 1, "reason": "Error", "message": "Traceback...\nValueError: nan loss\n"}}
    pod = {
        "status": {
            "phase": "Running",
            "containerStatuses": [{"name": "pytorch", "restartCount": 2, "lastState": last, "state": {"running": {}}}],
        }
    }
    failure = in_place_failure(pod, "pytorch")
    assert failure is not None
    assert (failure.failure_class, failure.exit_code, failure.attempt) == ("User", 1, 1)
    assert failure.message == "Traceback...\nValueError: nan loss"
    pod["status"]["containerStatuses"][0]["restartCount"] = 0
    assert in_place_failure(pod, "pytorch") is None


def test_a_pod_level_failure_after_in_place_restarts_is_a_run_of_its_own() -> None:
    """An evicted pod that had restarted in place twice: its failure is the third run, not the second (which
    the in-place record already holds), so both are recorded."""
    last = {"terminated": {"exitCode": 1, "reason": "Error"}}
    pod = {
        "status": {
            "phase": "Running",
            "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}],
            "containerStatuses": [{"name": "pytorch", "restartCount": 2, "lastState": last, "state": {"running": {}}}],
        }
    }
    in_place = in_place_failure(pod, "pytorch")
    evicted = classify(pod, "pytorch")
    assert in_place is not None and (in_place.attempt, evicted.attempt) == (1, 2)
    assert evicted.failure_class == "Infrastructure"
