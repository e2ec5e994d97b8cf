"""The termination message the node agents report for ``terminationMessagePolicy``, as a kubelet does."""

from __future__ import annotations

from kubedl_local.node.termination import MAX_LOG_BYTES, MAX_LOG_LINES, termination_message

FALLBACK = {"name": "c", "terminationMessagePolicy": "FallbackToLogsOnError"}


def test_a_failed_container_falls_back_to_its_last_log_lines() -> None:
    lines = [f"step {n}" for n in range(200)]
    message = termination_message(FALLBACK, 1, lines)
    assert message is not None
    assert message.splitlines() == lines[-MAX_LOG_LINES:]


def test_the_fallback_is_bounded_in_bytes_keeping_the_end() -> None:
    message = termination_message(FALLBACK, 137, ["x" * 5000, "the end"])
    assert message is not None and len(message.encode()) <= MAX_LOG_BYTES and message.endswith("the end\n")


def test_no_message_for_success_or_the_file_policy() -> None:
    assert termination_message(FALLBACK, 0, ["done"]) is None
    assert termination_message({"name": "c"}, 1, ["boom"]) is None
    assert termination_message(FALLBACK, 1, []) is None
