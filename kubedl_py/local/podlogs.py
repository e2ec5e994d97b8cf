"""Container logs as the kubelet keeps them: per container, the current and the previous instance.

The simulated runtime writes a few lines per container start and exit; a process runtime can append real
output. The API server's ``pods/<name>/log`` reads from here, including ``follow`` streaming.
"""

from __future__ import annotations

import asyncio
import datetime as dt

Key = tuple[str, str, str]  # namespace, pod, container


class ContainerLog:
    __slots__ = ("closed", "lines", "previous", "waiters")

    def __init__(self) -> None:
        self.lines: list[tuple[str, str]] = []  # (timestamp, text)
        self.previous: list[tuple[str, str]] | None = None
        self.closed = False  # the current instance has exited
        self.waiters: set[asyncio.Event] = set()

    def _wake(self) -> None:
        for w in self.waiters:
            w.set()


class PodLogs:
    def __init__(self, max_lines: int = 10_000) -> None:
        self.logs: dict[Key, ContainerLog] = {}
        self.max_lines = max_lines

    def get(self, key: Key) -> ContainerLog | None:
        return self.logs.get(key)

    def start(self, key: Key) -> None:
        """A new instance of the container starts; the old one becomes ``previous``."""
        log = self.logs.get(key)
        if log is None:
            log = self.logs[key] = ContainerLog()
        elif log.lines or log.closed:
            log.previous = log.lines
            log.lines = []
        log.closed = False
        log._wake()

    def write(self, key: Key, text: str) -> None:
        log = self.logs.get(key)
        if log is None:
            log = self.logs[key] = ContainerLog()
        ts = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        for line in text.splitlines() or [""]:
            log.lines.append((ts, line))
        if len(log.lines) > self.max_lines:
            del log.lines[: len(log.lines) - self.max_lines]
        log._wake()

    def close(self, key: Key) -> None:
        log = self.logs.get(key)
        if log is not None:
            log.closed = True
            log._wake()

    def forget_pod(self, namespace: str, pod: str) -> None:
        for key in [k for k in self.logs if k[0] == namespace and k[1] == pod]:
            log = self.logs.pop(key)
            log.closed = True
            log._wake()
