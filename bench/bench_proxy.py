"""Throughput and connection rate of the userspace Service proxy on loopback.

The proxy runs alone in this process's event loop; the client and the backend run in a helper process with
blocking sockets (big sendall/recv_into), so the figure is the proxy's cost, not a Python client's.

    .venv/bin/python bench/bench_proxy.py [--mb 1024] [--conns 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import socket
import subprocess
import sys
import threading
import time

CHUNK = 1 << 20


def _serve(listener: socket.socket) -> None:
    """Backend: upload sink (replies with the byte count), download source (``D<n>``), or echo (``E``)."""
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=_handle, args=(conn,), daemon=True).start()


def _handle(conn: socket.socket) -> None:
    with conn:
        mode = conn.recv(1)
        if mode == b"U":
            buf = bytearray(CHUNK)
            total = 0
            while n := conn.recv_into(buf):
                total += n
            conn.sendall(str(total).encode())
        elif mode == b"D":
            n = int(conn.recv(32).decode())
            data = b"x" * CHUNK
            for _ in range(n):
                conn.sendall(data)
        elif mode == b"E":
            conn.sendall(conn.recv(64))


def helper(mb: int, conns: int) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    threading.Thread(target=_serve, args=(listener,), daemon=True).start()
    print(listener.getsockname()[1], flush=True)
    host, port = sys.stdin.readline().split()
    addr = (host, int(port))
    out: dict[str, float] = {}

    data = b"x" * CHUNK
    start = time.perf_counter()
    with socket.create_connection(addr) as s:
        s.sendall(b"U")
        for _ in range(mb):
            s.sendall(data)
        s.shutdown(socket.SHUT_WR)  # half-close: the backend still answers
        assert int(s.recv(64)) == mb * CHUNK
    out["upload_MBps"] = mb / (time.perf_counter() - start)

    buf = bytearray(CHUNK)
    start = time.perf_counter()
    with socket.create_connection(addr) as s:
        s.sendall(b"D" + str(mb).encode().ljust(31))
        got = 0
        while n := s.recv_into(buf):
            got += n
        assert got == mb * CHUNK
    out["download_MBps"] = mb / (time.perf_counter() - start)

    start = time.perf_counter()
    for _ in range(conns):
        with socket.create_connection(addr) as s:
            s.sendall(b"Eping")
            assert s.recv(64) == b"ping"
    out["connections_per_s"] = conns / (time.perf_counter() - start)
    print(json.dumps(out), flush=True)


async def run(mb: int, conns: int) -> dict[str, float]:
    from kubedl_local.node.process import Backend, ServicePort, ServiceProxy

    proc = await asyncio.create_subprocess_exec(
        sys.executable, __file__, "--helper", "--mb", str(mb), "--conns", str(conns),
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    backend_port = int(await proc.stdout.readline())
    proxy = ServiceProxy(lambda _sp: [Backend("127.0.0.1", backend_port)])
    cluster_ip = f"127.1.{random.randint(1, 254)}.{random.randint(1, 254)}"
    sp = ServicePort("bench", "svc", 8080)
    try:
        await proxy.add_listener(sp, cluster_ip, _free_port(cluster_ip))
        # The listener opens once a probe finds the backend listening.
        await asyncio.wait_for(proxy.wait_open(sp), 10)
        ip, port = proxy.listeners()[sp]
        proc.stdin.write(f"{ip} {port}\n".encode())
        await proc.stdin.drain()
        result: dict[str, float] = json.loads(await proc.stdout.readline())
    finally:
        await proxy.close()
        if proc.returncode is None:
            proc.kill()
        await proc.wait()
    return result


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=int, default=1024, help="megabytes per direction")
    parser.add_argument("--conns", type=int, default=2000, help="sequential short connections")
    parser.add_argument("--helper", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.helper:
        helper(args.mb, args.conns)
        return
    r = asyncio.run(run(args.mb, args.conns))
    print(f"proxy upload   {r['upload_MBps']:8.0f} MB/s  ({args.mb} MiB through one connection)")
    print(f"proxy download {r['download_MBps']:8.0f} MB/s")
    print(f"proxy connect  {r['connections_per_s']:8.0f} connections/s (sequential, 1 round trip each)")
    print(json.dumps({key: round(value, 1) for key, value in r.items()}))


if __name__ == "__main__":
    main()
