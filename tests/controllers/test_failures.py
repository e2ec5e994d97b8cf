"""Which failures the ExitCode policy retries."""

from __future__ import annotations

from typing import Any

import pytest

from kubedl_py.controllers.failures import classify


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
