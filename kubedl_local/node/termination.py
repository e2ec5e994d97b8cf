"""A container's termination message, as the kubelet makes it for ``terminationMessagePolicy``.

Why: with ``FallbackToLogsOnError`` the kubelet puts the last lines of a failed container's log into
``state.terminated.message`` (at most 80 lines and 2,048 bytes, the kubelet's ``kubecontainer`` limits), and
the training-job controller keeps that evidence when it replaces the pod. Every runtime of the node agents
reports it the same way, so what a test sees locally is what a real kubelet writes. Not done: the
``terminationMessagePath`` file (the default ``File`` policy then reports no message at all).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Final

#: the kubelet's bounds on a message taken from the log
MAX_LOG_LINES: Final = 80
MAX_LOG_BYTES: Final = 2048
FALLBACK_TO_LOGS_ON_ERROR: Final = "FallbackToLogsOnError"


def termination_message(container: Mapping[str, Any], exit_code: int, lines: Iterable[str]) -> str | None:
    """The message of a container that ended with ``exit_code`` whose log ends with ``lines``; None when the
    kubelet would report none (policy ``File``, or a successful exit)."""
    if exit_code == 0 or container.get("terminationMessagePolicy") != FALLBACK_TO_LOGS_ON_ERROR:
        return None
    tail = list(lines)[-MAX_LOG_LINES:]
    text = "".join(f"{line}\n" for line in tail)
    data = text.encode()
    if len(data) > MAX_LOG_BYTES:
        text = data[-MAX_LOG_BYTES:].decode(errors="ignore")
    return text or None
