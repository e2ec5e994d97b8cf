"""A TensorFlow-style PS/Worker program without TensorFlow: it checks the wiring a TFJob relies on.

What TensorFlow does with TF_CONFIG, this does with plain sockets: it reads ``TF_CONFIG``, listens on the port
of its *own* entry (in host-network mode that is its host port), and connects to every *peer* entry (the
Service addresses ``<svc>.<ns>.svc:2222``), exchanging one line per connection. A new connection every
round means a peer that failed over to a new host port is reached again through the same Service address
once the Service is re-pointed: the log shows the peer's new instance (pid and port) behind the unchanged
address. Refused or reset connections are retried each round, as TensorFlow's gRPC channels do.

Roles: PS replicas serve until they are stopped (the job's cleanPodPolicy removes them). Workers run at least
``--rounds`` rounds ``--interval`` seconds apart and finish once every peer has answered and every PS answered
in the last round (and, with ``--until-ps-instances 2``, after each PS has failed over once; the e2e test
uses that so a worker cannot finish before the PS it kills came back); they keep serving ``--linger``
seconds more for peers still finishing, then exit 0 (exit 1 if that does not happen before ``--deadline``).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import sys
import threading
import time


def log(msg: str) -> None:
    print(msg, flush=True)


def serve(port: int, me: str) -> None:
    srv = socket.create_server(("0.0.0.0", port), reuse_port=False)
    srv.listen(64)

    def handle(conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            data = conn.makefile("r").readline().strip()
            conn.sendall(f"ACK {me} pid={os.getpid()} port={port} to {data.removeprefix('HELLO ')}\n".encode())

    while True:
        conn, _ = srv.accept()
        threading.Thread(target=handle, args=(conn,), daemon=True).start()


def ask(addr: str, me: str) -> str:
    host, _, port = addr.rpartition(":")
    with socket.create_connection((host, int(port)), timeout=2) as s:
        s.settimeout(2)
        s.sendall(f"HELLO {me}\n".encode())
        reply = s.makefile("r").readline().strip()
    if not reply.startswith("ACK "):
        raise ConnectionError(f"no answer (got {reply!r})")
    return reply


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--interval", type=float, default=0.3)
    parser.add_argument("--linger", type=float, default=3.0)
    parser.add_argument(
        "--until-ps-instances",
        type=int,
        default=1,
        help="finish only after each PS answered from this many distinct instances (2: after one failover)",
    )
    parser.add_argument("--deadline", type=float, default=120.0)
    args = parser.parse_args()

    config = json.loads(os.environ["TF_CONFIG"])
    task_type, index = config["task"]["type"], int(config["task"]["index"])
    me = f"{task_type}-{index}"
    own = config["cluster"][task_type][index]
    port = int(own.rpartition(":")[2])
    peers = {
        f"{t}-{i}": addr
        for t, addrs in config["cluster"].items()
        for i, addr in enumerate(addrs)
        if (t, i) != (task_type, index)
    }
    threading.Thread(target=serve, args=(port, me), daemon=True).start()
    log(f"{me} pid={os.getpid()} listening on :{port} (own entry {own}); peers {peers}")

    seen: dict[str, str] = {}  # peer -> "pid=... port=..." of the instance that last answered
    instances: dict[str, set[str]] = {p: set() for p in peers}
    started = time.monotonic()
    rounds = 0
    while True:
        rounds += 1
        answered: set[str] = set()
        for peer, addr in peers.items():
            try:
                reply = ask(addr, me)
            except OSError as exc:
                log(f"round {rounds}: {peer} at {addr} not reachable ({type(exc).__name__}); retrying")
                continue
            answered.add(peer)
            instance = " ".join(reply.split()[2:4])
            instances[peer].add(instance)
            if seen.get(peer) != instance:
                verb = "reached" if peer not in seen else "reconnected to"
                log(f"round {rounds}: {verb} {peer} at {addr}: {instance}")
                seen[peer] = instance
        ps_ok = all(
            p in answered and len(instances[p]) >= args.until_ps_instances for p in peers if p.startswith("ps-")
        )
        if task_type != "ps" and rounds >= args.rounds and len(seen) == len(peers) and ps_ok:
            log(f"{me} done: {rounds} rounds, every peer answered through its Service address")
            time.sleep(args.linger)  # keep answering peers that are finishing their last round
            return 0
        if task_type != "ps" and time.monotonic() - started > args.deadline:
            log(f"{me}: peers still unreachable after {args.deadline}s")
            return 1
        time.sleep(args.interval)


if __name__ == "__main__":
    sys.exit(main())
