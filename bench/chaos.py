"""``python -m bench.chaos --seed S --minutes M``: a seeded fault soak on the real control plane (issue 55, a first
version).

A real cluster with simulated nodes (``bench/realplane.py``), kubedl-py's controller as a subprocess with its
own RBAC-bound identity, and a steady load: ``--active`` PyTorchJobs at a time in two namespaces, half in
host-network mode, each pod "training" for 15-40 s (the simulated runtime's ``run-seconds``), each finished job
deleted and replaced by a new one. Meanwhile a schedule drawn from ``--seed`` injects, every ``--every``
seconds on average, one of:

- ``pod-delete``: a live pod of a running job deleted (the controller replaces it; host network: a new port);
- ``node-freeze``: a node frozen (no heartbeats, no status) for 20-60 s, then thawed;
- ``controller-kill``: the controller SIGKILLed and started again;
- ``service-edit``: a job's Service given a wrong ``targetPort`` by hand (the controller puts it back).

Every watch event of the pods, Services and jobs goes through :class:`bench.invariants.Checker` as it arrives
and ``tick`` runs twice a second; a violation is printed at once with the events before it. At the end the
load stops, every job must finish within ``--drain`` seconds, every job is deleted and nothing of them may be
left. The report (stdout, and ``--out`` as JSON): faults by kind, jobs submitted and finished, violations,
the controller's RSS over time.

Not yet (issue 55's list): rank exits of both classes, node removal, API server and etcd restarts, the fault
proxy's errors and latency, port-range exhaustion, namespace deletion, strangers' objects, a paused leader,
two controller replicas, other kinds and gangs; the budget and namespace invariants; a short run in make test.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.contenders import PYTORCHJOBS
from bench.harness import KUBEDL_PY, free_port
from bench.invariants import Checker, Violation, condition_true
from bench.realplane import real_cluster
from kubedl_local.kubernetes.cluster import create_namespace
from kubedl_local.node.agent import POWER_LABEL
from kubedl_py.api import constants as c
from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import ApiError, Gone, NotFound
from kubedl_py.kube.resources import NODES, PODS, SERVICES, Resource

NAMESPACES = ("chaos-a", "chaos-b")
OURS = f"{c.LABEL_CONTROLLER}={c.CONTROLLER_NAME}"
FAULTS = ("pod-delete", "node-freeze", "controller-kill", "service-edit")


def chaos_job(name: str, namespace: str, rng: random.Random) -> dict[str, Any]:
    seconds = str(rng.randint(15, 40))
    template = {
        "metadata": {"annotations": {"local.kubedl.io/run-seconds": seconds}},
        "spec": {"containers": [{"name": "pytorch", "image": "busybox", "command": ["train"]}]},
    }
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if rng.random() < 0.5:
        metadata["annotations"] = {c.ANNOTATION_NETWORK_MODE: c.NETWORK_MODE_HOST}
    workers = rng.randint(1, 3)
    return {
        "apiVersion": c.API_VERSION,
        "kind": c.PYTORCH_KIND,
        "metadata": metadata,
        "spec": {
            "runPolicy": {"backoffLimit": 20},
            "pytorchReplicaSpecs": {
                "Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": template},
                "Worker": {"replicas": workers, "restartPolicy": "OnFailure", "template": template},
            },
        },
    }


class Controller:
    """kubedl-py's controller as a subprocess, killed and started again at will; its RSS sampled."""

    def __init__(self, kubeconfig: Path, log: Path) -> None:
        self.kubeconfig, self.log = kubeconfig, log
        self.proc: asyncio.subprocess.Process | None = None
        self.rss: list[tuple[float, float]] = []

    async def start(self) -> None:
        args = [*KUBEDL_PY, "controller", "--kubeconfig", str(self.kubeconfig)]
        args += ["--metrics-addr", f"127.0.0.1:{free_port()}", "--health-addr", f"127.0.0.1:{free_port()}"]
        with self.log.open("ab") as out:
            self.proc = await asyncio.create_subprocess_exec(*args, stdout=out, stderr=out)

    async def kill(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGKILL)
            await self.proc.wait()

    def sample(self, since: float) -> None:
        if self.proc is None or self.proc.returncode is not None:
            return
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    self.rss.append((round(time.monotonic() - since, 1), int(line.split()[1]) / 1024))

    async def stop(self) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), 20)
            except TimeoutError:
                await self.kill()


class Soak:
    def __init__(self, kube: KubeClient, checker: Checker, rng: random.Random, controller: Controller) -> None:
        self.kube, self.checker, self.rng, self.controller = kube, checker, rng, controller
        self.started = time.monotonic()
        self.violations: list[Violation] = []
        self.faults: Counter[str] = Counter()
        self.jobs: dict[str, dict[str, Any]] = {}  # namespace/name -> the latest copy seen
        self.submitted = 0
        self.finished: set[str] = set()
        #: watch events the checker was fed
        self.events = 0
        #: finished jobs already asked to go (not deleted again each second until their DELETED event)
        self.deleting: set[str] = set()
        #: thaws still to come (kept: the loop holds only weak references to its tasks)
        self.thaws: set[asyncio.Task[None]] = set()

    def _found(self, found: list[Violation]) -> None:
        for violation in found:
            self.violations.append(violation)
            at = violation.at - self.started
            print(f"VIOLATION at {at:.1f} s: {violation.invariant}: {violation.message}", flush=True)
            for event in violation.events[-10:]:
                print(f"    {event}", flush=True)

    async def watch(self, resource: Resource) -> None:
        selector = OURS if resource in (PODS, SERVICES) else None
        while True:
            listed = await self.kube.list(resource, label_selector=selector)
            for obj in listed.items:
                self._event(resource, "ADDED", obj)
            version = listed.resource_version
            try:
                while True:
                    async for event in self.kube.watch(
                        resource, label_selector=selector, resource_version=version, timeout_seconds=60
                    ):
                        version = (event.object.get("metadata") or {}).get("resourceVersion", version)
                        if event.type != "BOOKMARK":
                            self._event(resource, event.type, event.object)
            except (Gone, ApiError, OSError):
                await asyncio.sleep(0.5)  # re-listed: what was missed comes as ADDED

    def _event(self, resource: Resource, kind: str, obj: dict[str, Any]) -> None:
        self.events += 1
        if resource == PODS:
            self._found(self.checker.pod(kind, obj))
        elif resource == SERVICES:
            self._found(self.checker.service(kind, obj))
        else:
            meta = obj.get("metadata") or {}
            key = f"{meta.get('namespace')}/{meta.get('name')}"
            if kind == "DELETED":
                self.jobs.pop(key, None)
            else:
                self.jobs[key] = obj
                if condition_true(obj, "Succeeded") or condition_true(obj, "Failed"):
                    self.finished.add(str(meta.get("uid")))
            self._found(self.checker.job(kind, obj))

    async def ticks(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            self._found(self.checker.tick())
            self.controller.sample(self.started)

    async def load(self, active: int, until: float) -> None:
        """Keep ``active`` unfinished jobs; delete each finished one."""
        while time.monotonic() < until:
            for key, job in list(self.jobs.items()):
                if _done(job) and key not in self.deleting:
                    self.deleting.add(key)
                    namespace, name = key.split("/", 1)
                    with contextlib.suppress(NotFound):
                        await self.kube.delete(PYTORCHJOBS, name, namespace=namespace)
            running = sum(1 for job in self.jobs.values() if not _done(job))
            for _ in range(max(0, active - running)):
                namespace = self.rng.choice(NAMESPACES)
                name = f"j{self.submitted:05d}"
                self.submitted += 1
                await self.kube.create(PYTORCHJOBS, chaos_job(name, namespace, self.rng), namespace=namespace)
            await asyncio.sleep(1.0)

    async def inject(self, every: float, until: float) -> None:
        nodes = [n["metadata"]["name"] for n in (await self.kube.list(NODES)).items]
        while True:
            await asyncio.sleep(self.rng.expovariate(1 / every))
            if time.monotonic() >= until:
                return
            fault = self.rng.choice(FAULTS)
            with contextlib.suppress(NotFound, ApiError):
                if await getattr(self, "_" + fault.replace("-", "_"))(nodes):
                    self.faults[fault] += 1

    async def _pod_delete(self, nodes: list[str]) -> bool:
        pods = [p for p in (await self.kube.list(PODS, label_selector=OURS)).items if _running(p)]
        if not pods:
            return False
        pod = self.rng.choice(pods)
        await self.kube.delete(PODS, pod["metadata"]["name"], namespace=pod["metadata"]["namespace"])
        return True

    async def _node_freeze(self, nodes: list[str]) -> bool:
        node = self.rng.choice(nodes)
        seconds = self.rng.uniform(20, 60)
        await self.kube.patch(NODES, node, {"metadata": {"labels": {POWER_LABEL: "off"}}})

        async def thaw() -> None:
            await asyncio.sleep(seconds)
            await self.kube.patch(NODES, node, {"metadata": {"labels": {POWER_LABEL: "on"}}})

        task = asyncio.get_running_loop().create_task(thaw())
        self.thaws.add(task)
        task.add_done_callback(self.thaws.discard)
        return True

    async def _controller_kill(self, nodes: list[str]) -> bool:
        await self.controller.kill()
        await self.controller.start()
        return True

    async def _service_edit(self, nodes: list[str]) -> bool:
        services = [s for s in (await self.kube.list(SERVICES, label_selector=OURS)).items if s["spec"].get("ports")]
        if not services:
            return False
        service = self.rng.choice(services)
        ports = [{**port, "targetPort": 1} for port in service["spec"]["ports"]]
        meta = service["metadata"]
        await self.kube.patch(SERVICES, meta["name"], {"spec": {"ports": ports}}, namespace=meta["namespace"])
        return True


def _done(job: dict[str, Any]) -> bool:
    return condition_true(job, "Succeeded") or condition_true(job, "Failed")


def _running(pod: dict[str, Any]) -> bool:
    return (pod.get("status") or {}).get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")


async def soak(args: argparse.Namespace, tmp: Path) -> dict[str, Any]:
    rng = random.Random(args.seed)
    with real_cluster(tmp, nodes=args.nodes) as cluster:
        async with KubeClient(kubeconfig=cluster.admin) as kube:
            for namespace in NAMESPACES:
                await create_namespace(kube, namespace)
            checker = Checker(stuck_bound=args.drain + args.minutes * 60 + 120)
            controller = Controller(cluster.controller, tmp / "controller.log")
            await controller.start()
            run = Soak(kube, checker, rng, controller)
            tasks = [asyncio.create_task(run.watch(r)) for r in (PODS, SERVICES, PYTORCHJOBS)]
            tasks.append(asyncio.create_task(run.ticks()))
            until = time.monotonic() + args.minutes * 60
            try:
                await asyncio.gather(run.load(args.active, until), run.inject(args.every, until))
                drained = await drain(run, time.monotonic() + args.drain)
                for key in list(run.jobs):
                    namespace, name = key.split("/", 1)
                    with contextlib.suppress(NotFound):
                        await kube.delete(PYTORCHJOBS, name, namespace=namespace)
                await asyncio.sleep(checker.orphan_bound + 5)  # the bound the checker gives the collector
                run._found(checker.tick())
            finally:
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                await controller.stop()
    peak = max((rss for _, rss in controller.rss), default=0.0)
    return {
        "seed": args.seed,
        "minutes": args.minutes,
        "faults": dict(run.faults),
        "jobs_submitted": run.submitted,
        "jobs_finished": len(run.finished),
        "events_checked": run.events,
        "drained": drained,
        "violations": [
            {
                "invariant": v.invariant,
                "at": round(v.at - run.started, 1),
                "message": v.message,
                "events": list(v.events),
            }
            for v in run.violations
        ],
        "controller_rss_mib": {
            "first": controller.rss[0][1] if controller.rss else None,
            "peak": peak,
            "last": controller.rss[-1][1] if controller.rss else None,
        },
        "rss_samples": controller.rss[:: max(1, len(controller.rss) // 60)],
    }


async def drain(run: Soak, deadline: float) -> bool:
    """Whether every job finished before ``deadline`` (no new ones are made meanwhile)."""
    while time.monotonic() < deadline:
        if all(_done(job) for job in run.jobs.values()):
            return True
        await asyncio.sleep(1.0)
    for key, job in run.jobs.items():
        if not _done(job):
            print(f"not finished after the drain: {key}")
    return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED", "1")))
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--active", type=int, default=20, help="unfinished jobs kept at once")
    parser.add_argument("--every", type=float, default=5.0, help="mean seconds between faults")
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--drain", type=float, default=240.0, help="seconds every job has to finish at the end")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kubedl-chaos.") as tmp:
        report = asyncio.run(soak(args, Path(tmp)))
    text = json.dumps(report, indent=2)
    print(text)
    if args.out is not None:
        args.out.write_text(text + "\n")
    ok = not report["violations"] and report["drained"]
    faults, violations, events = sum(report["faults"].values()), len(report["violations"]), report["events_checked"]
    print(f"chaos: seed {args.seed}, {faults} faults, {events} events checked, {violations} violations")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
