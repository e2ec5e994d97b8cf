"""Container logs as the kubelet serves them: the query parameters of ``/containerLogs`` and their meaning.

Why here and not in a runtime: both runtimes hand the kubelet endpoint a :class:`LogStream` (the simulated
one from memory, the process one from CRI-format files), and the endpoint applies ``tailLines``,
``sinceSeconds``/``sinceTime``, ``timestamps``, ``limitBytes`` and ``follow`` the same way for both, in the
kubelet's order: tail first (the last N lines), then the time filter, then the byte limit, which cuts the
output mid-line exactly at the limit as the kubelet's limited writer does.

Following hands over lines in *batches*: each batch is every line written since the last one, so a burst
(300 lines at once) costs one write on the wire, and a line printed while nothing else comes is sent at
once, alone. (Batching by a fixed count instead held up to 255 lines until more output came, or for ever
when the program went quiet: ``kubectl logs -f`` showed nothing of a job printing a line a second.)
"""

from __future__ import annotations

import asyncio
import calendar
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import NamedTuple, Protocol

from kubedl_local.node.process.logs import rfc3339_nano


class LogEntry(NamedTuple):
    """One line: its RFC3339Nano timestamp and text (without the newline)."""

    ts: str
    text: str


class LogStream(Protocol):
    """One container instance's log."""

    def read(self) -> list[LogEntry]:
        """Every complete line written so far."""
        ...

    def follow(self, tail: int | None) -> AsyncIterator[list[LogEntry]]:
        """The existing lines (the last ``tail`` of them), then new ones until the instance exits, in batches:
        each batch is every line there is at that moment (never empty), so nothing waits for more output."""
        ...


class LogError(Exception):
    """The kubelet's answer is an error: ``status`` (400, 404) and a plain-text message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class LogQuery:
    follow: bool = False
    tail_lines: int | None = None
    limit_bytes: int | None = None
    since: float | None = None  # epoch seconds
    timestamps: bool = False
    previous: bool = False

    @classmethod
    def parse(cls, q: Mapping[str, str], now: float | None = None) -> LogQuery:
        """From URL parameters; raises :class:`LogError` 400 on malformed values."""

        def flag(name: str) -> bool:
            return q.get(name, "").lower() in ("true", "1")

        def number(name: str, minimum: int) -> int | None:
            raw = q.get(name)
            if raw is None or raw == "":
                return None
            try:
                value = int(raw)
            except ValueError:
                raise LogError(400, f"invalid {name} {raw!r}") from None
            if value < minimum:
                raise LogError(400, f"{name} must be at least {minimum}")
            return value

        since: float | None = None
        seconds = number("sinceSeconds", 1)
        if seconds is not None:
            since = (time.time() if now is None else now) - seconds
        if q.get("sinceTime"):
            if since is not None:
                raise LogError(400, "at most one of sinceTime or sinceSeconds may be specified")
            try:
                since = parse_time(q["sinceTime"])
            except ValueError:
                raise LogError(400, f"invalid sinceTime {q['sinceTime']!r}") from None
        return cls(
            follow=flag("follow"),
            tail_lines=number("tailLines", 0),
            limit_bytes=number("limitBytes", 1),
            since=since,
            timestamps=flag("timestamps"),
            previous=flag("previous"),
        )


def parse_time(text: str) -> float:
    """RFC 3339 (``2026-01-02T03:04:05Z``, with any fraction, or a ``+hh:mm`` offset) to epoch seconds."""
    text = text.strip()
    offset = 0.0
    if text.endswith(("Z", "z")):
        text = text[:-1]
    elif len(text) > 6 and text[-6] in "+-" and text[-3] == ":":
        sign = -1 if text[-6] == "-" else 1
        offset = sign * (int(text[-5:-3]) * 3600 + int(text[-2:]) * 60)
        text = text[:-6]
    base, _, frac = text.partition(".")
    parsed = time.strptime(base, "%Y-%m-%dT%H:%M:%S")
    value = float(calendar.timegm(parsed)) - offset
    if frac:
        if not frac.isdigit():
            raise ValueError(text)
        value += int(frac) / 10 ** len(frac)
    return value


#: lines per chunk of a log read whole (not followed)
_CHUNK_LINES = 256


async def render(stream: LogStream, q: LogQuery) -> AsyncIterator[bytes]:
    """The body of a ``/containerLogs`` answer, chunk by chunk: a followed log's chunk is sent as soon as
    its lines are written (one chunk per batch of :meth:`LogStream.follow`)."""
    remaining = q.limit_bytes

    def fmt(entry: LogEntry) -> bytes:
        return ((f"{entry.ts} {entry.text}\n") if q.timestamps else (entry.text + "\n")).encode()

    def keep(entry: LogEntry) -> bool:
        return q.since is None or parse_time(entry.ts) >= q.since

    if q.follow:
        source = stream.follow(q.tail_lines)
    else:
        lines = stream.read()
        if q.tail_lines is not None:
            lines = lines[-q.tail_lines :] if q.tail_lines > 0 else []

        async def listed() -> AsyncIterator[list[LogEntry]]:
            for start in range(0, len(lines), _CHUNK_LINES):
                yield lines[start : start + _CHUNK_LINES]

        source = listed()
    async for entries in source:
        batch: list[bytes] = []
        for entry in entries:
            if not keep(entry):
                continue
            data = fmt(entry)
            if remaining is not None and len(data) >= remaining:
                batch.append(data[:remaining])
                yield b"".join(batch)
                return
            if remaining is not None:
                remaining -= len(data)
            batch.append(data)
        if batch:
            # A followed batch goes out now, however small: the next line may be a long time coming.
            yield b"".join(batch)


# ---- in-memory logs (simulated runtime) --------------------------------------------------------------------


class _Instance:
    __slots__ = ("closed", "lines", "waiters")

    def __init__(self) -> None:
        self.lines: list[LogEntry] = []
        self.closed = False
        self.waiters: set[asyncio.Event] = set()

    def wake(self) -> None:
        for w in self.waiters:
            w.set()


class _MemoryStream:
    def __init__(self, inst: _Instance) -> None:
        self.inst = inst

    def read(self) -> list[LogEntry]:
        return list(self.inst.lines)

    async def follow(self, tail: int | None) -> AsyncIterator[list[LogEntry]]:
        inst = self.inst
        pos = 0 if tail is None else max(0, len(inst.lines) - tail)
        waker = asyncio.Event()
        inst.waiters.add(waker)
        try:
            while True:
                waker.clear()
                if pos < len(inst.lines):
                    batch, pos = inst.lines[pos:], len(inst.lines)
                    yield batch
                if inst.closed:
                    return
                await waker.wait()
        finally:
            inst.waiters.discard(waker)


class MemoryLogs:
    """Per container: the current and the previous instance's lines (the simulated runtime's "files")."""

    def __init__(self, max_lines: int = 10_000) -> None:
        self._logs: dict[tuple[str, str, str], tuple[_Instance, _Instance | None]] = {}
        self.max_lines = max_lines

    def start(self, key: tuple[str, str, str]) -> None:
        """A new instance of the container starts; the one before becomes ``previous``."""
        cur = self._logs.get(key)
        if cur is not None:
            cur[0].closed = True
            cur[0].wake()
        self._logs[key] = (_Instance(), cur[0] if cur is not None else None)

    def write(self, key: tuple[str, str, str], text: str) -> None:
        cur = self._logs.get(key)
        if cur is None:
            self.start(key)
            cur = self._logs[key]
        inst = cur[0]
        ts = rfc3339_nano(time.time_ns())
        inst.lines.extend(LogEntry(ts, line) for line in (text.splitlines() or [""]))
        if len(inst.lines) > self.max_lines:
            del inst.lines[: len(inst.lines) - self.max_lines]
        inst.wake()

    def close(self, key: tuple[str, str, str]) -> None:
        cur = self._logs.get(key)
        if cur is not None:
            cur[0].closed = True
            cur[0].wake()

    def stream(self, key: tuple[str, str, str], *, previous: bool) -> LogStream | None:
        cur = self._logs.get(key)
        if cur is None:
            return None
        inst = cur[1] if previous else cur[0]
        return _MemoryStream(inst) if inst is not None else None

    def forget_pod(self, namespace: str, pod: str) -> None:
        for key in [k for k in self._logs if k[0] == namespace and k[1] == pod]:
            self.close(key)
            del self._logs[key]
