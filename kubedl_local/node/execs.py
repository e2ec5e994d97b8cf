"""``kubectl exec`` on the node agents: the kubelet's ``/exec`` endpoint over WebSocket.

Why: the Training Operator v1's MPIJob starts its ranks with ``kubectl exec`` from the launcher into Workers that
only sleep (``kubexec.sh`` as Open MPI's rsh agent), so a drop-in must run that on the local clusters, with the
API server in between as in production. Kubernetes 1.37 proxies an exec's WebSocket straight to a kubelet that
declares ``ExtendWebSocketsToKubelet`` in ``status.declaredFeatures`` (no SPDY translation), and the embedded
API server does the same; this module is the kubelet's end.

The protocol (``k8s.io/streaming`` ``wsstream`` and the CRI streaming server): binary messages whose first byte
is the channel, ``0`` stdin, ``1`` stdout, ``2`` stderr, ``3`` the error channel (one JSON ``metav1.Status`` when
the command ends: ``Success``, or ``Failure``/``NonZeroExitCode`` with the exit code as a cause, which kubectl
turns into its own exit code), ``4`` terminal resize; ``v5.channel.k8s.io`` adds ``255 <channel>``, the client
closing one of its streams (stdin's end). An empty message on the first output channel tells the client the
stream is up. The command runs as the container does (its sandbox, environment, directory: the runtime's
``ExecContext``), in a process group of its own that is killed if the client goes away.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from aiohttp import WSMsgType, web

log = logging.getLogger(__name__)

#: subprotocols served, preferred first (``v5`` has the stream-close signal kubectl 1.30+ sends)
PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
STDIN, STDOUT, STDERR, ERROR, RESIZE = 0, 1, 2, 3, 4
CLOSE = 255


class ExecError(Exception):
    """The exec cannot start: an HTTP status and the kubelet's message."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class ExecTarget:
    """How to run a command beside a container: its wrapped argv prefix is applied by ``wrap``."""

    env: Mapping[str, str]
    cwd: str
    #: turns the user's argv into the argv that runs it as the container runs (its sandbox)
    wrap: Any


@dataclass(frozen=True)
class ExecRequest:
    command: tuple[str, ...]
    stdin: bool
    stdout: bool
    stderr: bool
    tty: bool

    @classmethod
    def parse(cls, query: Mapping[str, str], commands: Sequence[str]) -> ExecRequest:
        def flag(*names: str) -> bool:
            return any(query.get(n, "").lower() in ("1", "true") for n in names)

        if not commands:
            raise ExecError(400, "you must specify at least 1 command")
        request = cls(
            command=tuple(commands),
            stdin=flag("input", "stdin"),
            stdout=flag("output", "stdout"),
            stderr=flag("error", "stderr"),
            tty=flag("tty"),
        )
        if not (request.stdin or request.stdout or request.stderr):
            raise ExecError(400, "you must specify at least 1 of stdin, stdout, stderr")
        return request


def status(code: int, command: Sequence[str]) -> bytes:
    """The error channel's last word, as the CRI streaming server writes it (v4 and later)."""
    if code == 0:
        return json.dumps({"metadata": {}, "status": "Success"}).encode()
    message = f"command terminated with non-zero exit code: error executing command {list(command)}, exit code {code}"
    body = {
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": str(code)}]},
    }
    return json.dumps(body).encode()


async def serve(request: web.Request, target: ExecTarget, exec_request: ExecRequest) -> web.WebSocketResponse:
    """Upgrade ``request`` and run the command until it ends (or the client goes)."""
    ws = web.WebSocketResponse(protocols=PROTOCOLS, autoping=True, heartbeat=None, max_msg_size=0)
    await ws.prepare(request)
    first = STDOUT if exec_request.stdout else STDERR if exec_request.stderr else ERROR
    await ws.send_bytes(bytes([first]))
    argv = target.wrap(list(exec_request.command))
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=subprocess.PIPE if exec_request.stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE if exec_request.stdout else subprocess.DEVNULL,
            stderr=subprocess.PIPE if exec_request.stderr else subprocess.DEVNULL,
            cwd=target.cwd,
            env=dict(target.env),
            start_new_session=True,
        )
    except OSError as exc:
        await ws.send_bytes(bytes([STDERR]) + f"exec {exec_request.command[0]!r}: {exc.strerror or exc}\n".encode())
        await ws.send_bytes(bytes([ERROR]) + status(127 if isinstance(exc, FileNotFoundError) else 126, argv))
        await ws.close()
        return ws

    async def pump(stream: asyncio.StreamReader | None, channel: int) -> None:
        if stream is None:
            return
        while chunk := await stream.read(65536):
            await ws.send_bytes(bytes([channel]) + chunk)

    async def feed() -> None:
        async for message in ws:
            if message.type != WSMsgType.BINARY or not message.data:
                continue
            data: bytes = message.data
            if data[0] == CLOSE or (data[0] == STDIN and proc.stdin is None):
                if proc.stdin is not None and len(data) > 1 and data[1] == STDIN:
                    proc.stdin.close()
                continue
            if data[0] == STDIN and proc.stdin is not None and len(data) > 1:
                proc.stdin.write(data[1:])
                with contextlib.suppress(ConnectionError):
                    await proc.stdin.drain()

    feeding = asyncio.create_task(feed(), name="exec stdin")
    try:
        await asyncio.gather(pump(proc.stdout, STDOUT), pump(proc.stderr, STDERR))
        code = await proc.wait()
        code = 128 - code if code < 0 else code
        await ws.send_bytes(bytes([ERROR]) + status(code, exec_request.command))
    except (ConnectionResetError, asyncio.CancelledError):
        raise
    finally:
        feeding.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await feeding
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
        with contextlib.suppress(ConnectionResetError):
            await ws.close()
    return ws
