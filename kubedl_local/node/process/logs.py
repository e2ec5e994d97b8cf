"""Per-container log files in the CRI format, and the reads the kubelet's ``/log`` endpoint needs.

Why the CRI format (``<RFC3339Nano> <stream> <P|F> <text>``, one record per line): it is what a real
kubelet reads from ``/var/log/pods``, it keeps stdout and stderr interleaved in arrival order in one file,
it carries a timestamp per line (for ``timestamps=true`` and ``sinceSeconds``), and it can split very long
lines into partial (``P``) records without losing them. One file per container *instance*
(``<restartCount>.log``), so ``previous=true`` is simply the file of the instance before.

Writers and readers live in the same process (the cluster), so following uses an in-memory change event
instead of inotify: the writer signals each append and finally marks the log closed when the process has
exited and both pipes are drained; ``follow()`` ends then, like ``kubectl logs -f`` does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

#: A line longer than this is written as several partial records, like the kubelet does (16 KiB).
MAX_RECORD_BYTES = 16 * 1024


def rfc3339_nano(ns: int) -> str:
    """Format a ``time.time_ns()`` value the way Kubernetes prints log timestamps."""
    secs, frac = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(secs)) + f".{frac:09d}Z"


@dataclass(frozen=True, slots=True)
class LogLine:
    """One logical line of container output (partial records already joined)."""

    timestamp: str  # RFC3339Nano of the first record of the line
    stream: str  # "stdout" or "stderr"
    text: str  # without the trailing newline

    def render(self, *, timestamps: bool = False) -> str:
        return f"{self.timestamp} {self.text}" if timestamps else self.text


class _Joiner:
    """Joins P records into logical lines; per stream, because stdout and stderr partials interleave."""

    def __init__(self) -> None:
        self._pending: dict[str, tuple[str, list[str]]] = {}

    def feed(self, raw: bytes) -> LogLine | None:
        parts = raw.rstrip(b"\n").split(b" ", 3)
        if len(parts) < 3:
            return None  # a torn last record while the writer appends; the caller re-reads it
        ts, stream, tag = (p.decode("ascii", "replace") for p in parts[:3])
        text = parts[3].decode("utf-8", "replace") if len(parts) == 4 else ""
        first_ts, chunks = self._pending.pop(stream, (ts, []))
        chunks.append(text)
        if tag == "P":
            self._pending[stream] = (first_ts, chunks)
            return None
        return LogLine(first_ts, stream, "".join(chunks))


class ContainerLog:
    """The log of one container instance: written by the runner, read by the kubelet.

    A ``ContainerLog`` created for a file left by an earlier cluster run is simply already closed.
    """

    def __init__(self, path: Path, *, writable: bool = False) -> None:
        self.path = path
        self._fd: int | None = None
        self._closed = not writable
        self._changed = asyncio.Event() if writable else None
        if writable:
            path.parent.mkdir(parents=True, exist_ok=True)
            # O_APPEND: records from the two stream readers never overwrite each other.
            self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o644)

    @property
    def closed(self) -> bool:
        """True once the process has exited and all its output is in the file."""
        return self._closed

    # -- writer side (the runner) ------------------------------------------------------------------------

    def append(self, stream: str, data: bytes, *, partial: bool = False) -> None:
        if self._fd is None:
            raise RuntimeError(f"log {self.path} is not open for writing")
        tag = b"P" if partial else b"F"
        record = b"%s %s %s %s\n" % (rfc3339_nano(time.time_ns()).encode(), stream.encode(), tag, data)
        os.write(self._fd, record)  # small synchronous append to the page cache; one syscall per line
        self._notify()

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._closed = True
        self._notify()

    def _notify(self) -> None:
        if self._changed is not None:
            self._changed.set()

    # -- reader side (the kubelet's /log endpoint) -------------------------------------------------------

    def read(self, *, tail_lines: int | None = None) -> list[LogLine]:
        """All complete lines now in the file, or the last ``tail_lines`` of them."""
        lines, _ = self._read_from(0)
        return _tail(lines, tail_lines)

    def read_text(self, *, tail_lines: int | None = None, timestamps: bool = False) -> str:
        """The body a kubelet returns for ``GET .../log`` (each line newline-terminated)."""
        return "".join(line.render(timestamps=timestamps) + "\n" for line in self.read(tail_lines=tail_lines))

    async def follow(self, *, tail_lines: int | None = None) -> AsyncIterator[LogLine]:
        """Yield existing lines (or the last ``tail_lines``), then new ones as they are written.

        Ends when the container instance has exited and its output is drained; for a closed log it yields
        what is there and ends at once. Cancel the iteration (or stop consuming) to stop following early.
        """
        async for batch in self.follow_batches(tail_lines=tail_lines):
            for line in batch:
                yield line

    async def follow_batches(self, *, tail_lines: int | None = None) -> AsyncIterator[list[LogLine]]:
        """:meth:`follow`, a batch at a time: every line written since the last batch (never empty), so a
        reader that sends each batch on at once never holds a line back waiting for more output."""
        if self._changed is None:
            lines = self.read(tail_lines=tail_lines)
            if lines:
                yield lines
            return
        offset = 0
        joiner = _Joiner()
        first = True
        while True:
            # Clear before reading: an append between our read and our wait sets the event again.
            self._changed.clear()
            closed = self._closed
            lines, offset = self._read_from(offset, joiner)
            if first:
                lines = _tail(lines, tail_lines)
                first = False
            if lines:
                yield lines
            if closed:
                return
            await self._changed.wait()

    def _read_from(self, offset: int, joiner: _Joiner | None = None) -> tuple[list[LogLine], int]:
        """Parse complete records from ``offset``; returns lines and the offset after the last full record."""
        joiner = joiner or _Joiner()
        try:
            with open(self.path, "rb") as f:
                f.seek(offset)
                data = f.read()
        except FileNotFoundError:
            return [], offset
        end = data.rfind(b"\n") + 1  # a record being appended right now is picked up next time
        out = [line for raw in data[:end].splitlines() if (line := joiner.feed(raw)) is not None]
        return out, offset + end


def _tail(lines: list[LogLine], n: int | None) -> list[LogLine]:
    if n is None:
        return lines
    return lines[-n:] if n > 0 else []


async def pump_stream(reader: asyncio.StreamReader, stream: str, sink: ContainerLog) -> None:
    """Copy one pipe into the log line by line; long lines become partial records, never get dropped."""
    buf = b""
    while True:
        chunk = await reader.read(64 * 1024)
        if not chunk:
            break
        buf += chunk
        while True:
            nl = buf.find(b"\n")
            if nl < 0:
                break
            line, buf = buf[:nl], buf[nl + 1 :]
            while len(line) > MAX_RECORD_BYTES:
                sink.append(stream, line[:MAX_RECORD_BYTES], partial=True)
                line = line[MAX_RECORD_BYTES:]
            sink.append(stream, line)
        while len(buf) > MAX_RECORD_BYTES:
            sink.append(stream, buf[:MAX_RECORD_BYTES], partial=True)
            buf = buf[MAX_RECORD_BYTES:]
    if buf:
        sink.append(stream, buf)  # output without a final newline is still a full line
