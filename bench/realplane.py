"""The real control plane for benchmarks, in its own process, with every client's requests counted.

Why a process of its own: etcd, kube-apiserver, kube-controller-manager and kube-scheduler are processes
anyway; the node agent (simulated kubelets: up to 1,000 nodes, each renewing its Lease every 10 s as a
kubelet does) runs in the Python process that starts them. Keeping that process apart from the controller
under test and from the process that measures means none of the three steals the others' event loop.

Why the audit log: the benchmark compares controllers written in Python and in Go, so their own request
counters cannot be compared. kube-apiserver's audit log records every request with the user that made it;
each contender runs under its own identity (kubedl-py as its ServiceAccount, exactly as installed; the
peers and the bare client each with a client certificate of their own name), and only their requests are
logged (level Metadata; everyone else, including the control plane's components and the node agent, at level
None), so the log costs the same for every contender. A request is counted once, by its audit ID.

    python bench/realplane.py --dir DIR [--nodes N] [--no-install]   # run until SIGTERM

writes ``DIR/info.json`` (kubeconfig paths, the audit log, component pids) once everything serves.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubedl_local.kubernetes.cluster import CONTROLLER_SERVICE_ACCOUNT, KubernetesCluster, KubernetesClusterOptions
from kubedl_local.kubernetes.controlplane import ControlPlaneOptions
from kubedl_py.templates.render import DEFAULT_NAMESPACE

#: the identities whose requests the audit log records (the controller's is its ServiceAccount)
KUBEDL_PY_USER = f"system:serviceaccount:{DEFAULT_NAMESPACE}:{CONTROLLER_SERVICE_ACCOUNT}"
CLIENT_USERS = ("bare-client", "training-operator", "kubedl")
WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def audit_policy(users: list[str], traced: list[str] | None = None) -> str:
    """Log ``users``' requests, and every user's requests on the pods and Services named ``traced`` (a benchmark
    follows those objects through the node agent and the controllers: a handful of requests, not a load)."""
    rules: list[dict[str, Any]] = [{"level": "Metadata", "users": users}]
    if traced:
        rules.append(
            {
                "level": "Metadata",
                "resources": [{"group": "", "resources": ["pods", "services"], "resourceNames": traced}],
            }
        )
    rules.append({"level": "None"})
    return json.dumps(
        {"apiVersion": "audit.k8s.io/v1", "kind": "Policy", "omitStages": ["RequestReceived"], "rules": rules}
    )


async def serve(directory: Path, nodes: int, install: bool, scheduler_qps: int | None = None) -> None:
    policy = directory / "audit-policy.json"
    audit_log = directory / "audit.log"
    options = KubernetesClusterOptions(
        nodes=nodes,
        runtime="simulated",
        install=install,
        control_plane=ControlPlaneOptions(
            data_dir=directory / "control-plane",
            # kube-controller-manager as kubeadm ships it (20/30) would trail the pods by minutes at 10,000
            # pods (garbage collection, endpoints); it is the same for every contender either way
            controller_manager_qps=100,
            controller_manager_burst=200,
            extra_args={
                "kube-apiserver": [
                    f"--audit-policy-file={policy}",
                    f"--audit-log-path={audit_log}",
                    "--audit-log-format=json",
                    "--audit-log-mode=blocking",
                    "--audit-log-maxsize=0",
                ],
                # kube-scheduler binds at most its client's QPS pods a second (default 50): raised, the time
                # until every pod runs measures the controllers, not the scheduler's rate limit
                **(
                    {"kube-scheduler": [f"--kube-api-qps={scheduler_qps}", f"--kube-api-burst={2 * scheduler_qps}"]}
                    if scheduler_qps
                    else {}
                ),
            },
        ),
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    started = time.monotonic()
    async with KubernetesCluster(options) as cluster:
        plane = cluster.control_plane
        info: dict[str, Any] = {
            "url": cluster.url,
            "admin": str(cluster.write_user_kubeconfig(directory / "admin.kubeconfig")),
            "users": {
                user: str(plane.user_kubeconfig(user, common_name=user, groups=["system:masters"]))
                for user in CLIENT_USERS
            },
            "audit_log": str(audit_log),
            "pids": plane.pids(),
            "nodes": nodes,
            "version": plane.version,
            "start_seconds": round(time.monotonic() - started, 1),
        }
        if install:
            info["controller"] = str(await cluster.controller_kubeconfig(directory / "controller.kubeconfig"))
        written = directory / "info.json.tmp"
        written.write_text(json.dumps(info, indent=2))
        written.rename(directory / "info.json")
        await stop.wait()


@dataclass
class RealCluster:
    """What the benchmark needs of a running real cluster."""

    directory: Path
    info: dict[str, Any]

    @property
    def admin(self) -> Path:
        return Path(self.info["admin"])

    @property
    def controller(self) -> Path:
        return Path(self.info["controller"])

    def user(self, name: str) -> Path:
        return Path(self.info["users"][name])

    @property
    def audit_log(self) -> Path:
        return Path(self.info["audit_log"])

    def audit_mark(self) -> int:
        """The audit log's length now: :meth:`requests` counts from here."""
        return self.audit_log.stat().st_size if self.audit_log.exists() else 0

    def _events(self, user: str | None, since: int, until: int | None) -> Iterator[dict[str, Any]]:
        """``user``'s audit events between two marks (None: everyone's), each request once (its last stage
        logged), in the order the log has them."""
        with self.audit_log.open("rb") as log:
            log.seek(since)
            data = log.read() if until is None else log.read(until - since)
        last: dict[str, dict[str, Any]] = {}
        for line in data.splitlines():
            if line.strip():
                event = json.loads(line)
                if user is None or event.get("user", {}).get("username") == user:
                    last[event["auditID"]] = event
        yield from last.values()

    def requests(self, user: str, since: int, until: int | None = None) -> Counter[str]:
        """``user``'s requests logged between two marks, by verb (``watch`` included), plus ``"total"`` and
        ``"writes"``."""
        counts: Counter[str] = Counter()
        for event in self._events(user, since, until):
            verb = event.get("verb", "?")
            counts[verb] += 1
            counts["total"] += 1
            if verb in WRITE_VERBS:
                counts["writes"] += 1
        return counts

    def write_latencies(self, user: str, since: int, until: int | None = None) -> list[tuple[float, float]]:
        """Per write of ``user`` between two marks, as kube-apiserver saw it: (seconds from receiving the
        request to completing the answer, seconds of that spent queued by API Priority and Fairness). The
        queue time comes from the ``apiserver.latency.k8s.io/apf-queue-wait`` audit annotation, which
        kube-apiserver adds to slow requests only (0 where it is absent)."""
        out: list[tuple[float, float]] = []
        for event in self._events(user, since, until):
            if event.get("verb") not in WRITE_VERBS or event.get("stage") != "ResponseComplete":
                continue
            took = _timestamp(event["stageTimestamp"]) - _timestamp(event["requestReceivedTimestamp"])
            queued = go_duration(event.get("annotations", {}).get("apiserver.latency.k8s.io/apf-queue-wait", "0s"))
            out.append((took, queued))
        return out

    def creates_span(self, user: str, resource: str, prefix: str, since: int) -> float | None:
        """Seconds from kube-apiserver receiving ``user``'s first create of a ``resource`` whose name starts with
        ``prefix`` (since the mark) to completing its last one: how long a burst of creates took."""
        spans = [
            (received(e), completed(e))
            for e in self._events(user, since, None)
            if e.get("verb") == "create"
            and (e.get("objectRef") or {}).get("resource") == resource
            and str((e.get("objectRef") or {}).get("name") or "").startswith(prefix)
        ]
        return max(end for _, end in spans) - min(start for start, _ in spans) if spans else None

    def traced(self, name: str, since: int, until: int | None = None) -> list[dict[str, Any]]:
        """Every logged request on the pod or Service ``name`` between two marks (any user: the cluster must
        have been started with ``traced=[name]``), ordered by when kube-apiserver received each."""
        events = [e for e in self._events(None, since, until) if (e.get("objectRef") or {}).get("name") == name]
        return sorted(events, key=lambda e: _timestamp(e["requestReceivedTimestamp"]))


def received(event: dict[str, Any]) -> float:
    """When kube-apiserver received the request of an audit event (seconds since the epoch)."""
    return _timestamp(event["requestReceivedTimestamp"])


def completed(event: dict[str, Any]) -> float:
    """When kube-apiserver completed the answer of an audit event (seconds since the epoch)."""
    return _timestamp(event["stageTimestamp"])


def _timestamp(value: str) -> float:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def go_duration(value: str) -> float:
    """Seconds in a Go ``time.Duration`` string (``"1m2.5s"``, ``"450.6649ns"``, ``"0s"``)."""
    total, rest = 0.0, value.strip()
    while rest:
        match = re.match(r"([0-9.]+)(ns|us|µs|μs|ms|s|m|h)", rest)
        if match is None:
            raise ValueError(f"not a Go duration: {value!r}")
        total += float(match.group(1)) * _GO_UNITS[match.group(2)]
        rest = rest[match.end() :]
    return total


@contextlib.contextmanager
def real_cluster(
    tmp: Path,
    *,
    nodes: int,
    install: bool = True,
    timeout: float = 300.0,
    traced: Sequence[str] = (),
    scheduler_qps: int | None = None,
) -> Iterator[RealCluster]:
    """A fresh real cluster (``serve`` in a subprocess); stopped, with its data, on exit. Every request on the
    pods and Services named in ``traced`` is audited too (:meth:`RealCluster.traced`)."""
    directory = tmp / f"real-{time.monotonic_ns()}"
    directory.mkdir(parents=True)
    argv = [sys.executable, __file__, "--dir", str(directory), "--nodes", str(nodes)]
    if not install:
        argv.append("--no-install")
    for name in traced:
        argv += ["--trace", name]
    if scheduler_qps:
        argv += ["--scheduler-qps", str(scheduler_qps)]
    with (directory / "cluster.log").open("ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + timeout
            info_path = directory / "info.json"
            while not info_path.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    tail = (directory / "cluster.log").read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"the real cluster did not start:\n{tail}")
                time.sleep(0.1)
            yield RealCluster(directory, json.loads(info_path.read_text()))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", type=Path, required=True)
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--no-install", action="store_true", help="no kubedl-py CRDs nor controller identity")
    parser.add_argument("--trace", action="append", default=[], help="also audit every request on this pod/Service")
    parser.add_argument("--scheduler-qps", type=int, default=None, help="kube-scheduler's client QPS (default 50)")
    args = parser.parse_args(argv)
    args.dir.mkdir(parents=True, exist_ok=True)
    (args.dir / "audit-policy.json").write_text(audit_policy([KUBEDL_PY_USER, *CLIENT_USERS], args.trace))
    asyncio.run(serve(args.dir, args.nodes, not args.no_install, args.scheduler_qps))
    return 0


if __name__ == "__main__":
    sys.exit(main())
