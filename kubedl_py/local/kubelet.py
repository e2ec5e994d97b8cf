"""Simulated kubelets: what runs a pod once it is bound to a node, without running anything.

For scale and integration tests a pod's "containers" are timers: bound pods become Running with the status
fields a real kubelet reports (containerStatuses, podIP, hostIP, startTime, conditions), a few log lines are
"written", and per-pod annotations decide how they end:

- ``local.kubedl.io/exit-code``: the exit code of every container (default: containers never exit);
- ``local.kubedl.io/run-seconds``: how long containers run before exiting (default 0 with an exit code;
  with only run-seconds the exit code is 0);
- ``local.kubedl.io/termination-seconds``: how long containers take to stop after deletion (default 0.1,
  capped at the grace period; the pod shows ``deletionTimestamp`` meanwhile).

``restartPolicy`` is applied as the kubelet does: Always restarts in place (restartCount+1 after a short
backoff), OnFailure restarts non-zero exits, Never leaves the pod Succeeded/Failed. The kubelets write to
the store directly (in-process) rather than over HTTP.
"""

from __future__ import annotations

import asyncio
import hashlib
import ipaddress
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from . import events
from .errors import ApiError
from .podlogs import PodLogs
from .registry import Registry, iso_at, now_iso
from .store import Event, Obj

log = logging.getLogger(__name__)

PODS = ("", "pods")
EXIT_CODE = "local.kubedl.io/exit-code"
RUN_SECONDS = "local.kubedl.io/run-seconds"
TERMINATION_SECONDS = "local.kubedl.io/termination-seconds"


@dataclass
class PodRun:
    """The kubelet's memory of one pod it runs."""

    ns: str
    name: str
    uid: str
    node: str
    started: dict[str, float] = field(default_factory=dict)  # container -> start time of current instance
    timers: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    stopping: asyncio.TimerHandle | None = None
    plan: tuple[str | None, str | None] = (None, None)  # annotations the exit timers were planned from
    done: bool = False


class IPPool:
    def __init__(self, cidr: str) -> None:
        self.net = ipaddress.ip_network(cidr, strict=False)
        self.free_list: list[str] = []
        self.next = 2
        self.used: set[str] = set()

    def take(self) -> str:
        while self.free_list:
            ip = self.free_list.pop()
            if ip not in self.used:
                self.used.add(ip)
                return ip
        while self.next < self.net.num_addresses - 1:
            ip = str(self.net.network_address + self.next)
            self.next += 1
            if ip not in self.used:
                self.used.add(ip)
                return ip
        raise RuntimeError(f"pod CIDR {self.net} exhausted")

    def give(self, ip: str | None) -> None:
        if ip and ip in self.used:
            self.used.discard(ip)
            self.free_list.append(ip)


def _annotation_float(pod: Obj, key: str) -> float | None:
    v = (pod["metadata"].get("annotations") or {}).get(key)
    if v is None:
        return None
    try:
        return float(v)
    except ValueError:
        return None


class Kubelets:
    """All simulated kubelets of the cluster; ``node_ips`` maps node name -> node IP."""

    def __init__(
        self,
        registry: Registry,
        logs: PodLogs,
        node_ips: dict[str, str],
        *,
        pod_cidr: str = "127.2.0.0/16",
        restart_backoff: float = 0.1,
        max_backoff: float = 2.0,
        termination_seconds: float = 0.1,
    ) -> None:
        self.registry = registry
        self.store = registry.store
        self.logs = logs
        self.node_ips = node_ips
        self.pod_ips = IPPool(pod_cidr)
        self.restart_backoff = restart_backoff
        self.max_backoff = max_backoff
        self.termination_seconds = termination_seconds
        self.runs: dict[tuple[str, str], PodRun] = {}
        self.frozen: set[str] = set()  # nodes whose kubelet is unreachable (lost)
        self.queue: dict[tuple[str, str], None] = {}
        self.wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.store.listeners.append(self._on_event)

    # ---- lifecycle ----------------------------------------------------------------------------------------

    def start(self) -> None:
        for pod in self.store.iter(PODS):
            ip = (pod.get("status") or {}).get("podIP")
            if ip and not (pod.get("spec") or {}).get("hostNetwork"):
                self.pod_ips.used.add(ip)
            if (pod.get("spec") or {}).get("nodeName"):
                self.queue[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = None
        self._task = asyncio.create_task(self._run(), name="local-kubelets")
        self.wake.set()

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for run in self.runs.values():
            self._cancel(run)

    def _cancel(self, run: PodRun) -> None:
        for t in run.timers.values():
            t.cancel()
        run.timers.clear()
        if run.stopping is not None:
            run.stopping.cancel()
            run.stopping = None

    def freeze(self, node: str) -> None:
        """The node's kubelet stops acting (node lost): pods keep their last reported status."""
        self.frozen.add(node)
        for run in self.runs.values():
            if run.node == node:
                self._cancel(run)

    def thaw(self, node: str) -> None:
        self.frozen.discard(node)
        for key, run in list(self.runs.items()):
            if run.node == node:
                self.queue[key] = None
                run.plan = (None, "resync")
        for pod in self.store.iter(PODS):
            if (pod.get("spec") or {}).get("nodeName") == node:
                self.queue[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = None
        self.wake.set()

    # ---- events -------------------------------------------------------------------------------------------

    def _on_event(self, ev: Event) -> None:
        if ev.rkey != PODS:
            return
        md = ev.obj["metadata"]
        key = (md["namespace"], md["name"])
        if ev.type == "DELETED":
            run = self.runs.pop(key, None)
            if run is not None:
                self._cancel(run)
            if not (ev.obj.get("spec") or {}).get("hostNetwork"):
                self.pod_ips.give((ev.obj.get("status") or {}).get("podIP"))
            self.logs.forget_pod(*key)
            return
        if (ev.obj.get("spec") or {}).get("nodeName"):
            self.queue[key] = None
            self.wake.set()

    async def _run(self) -> None:
        while True:
            await self.wake.wait()
            self.wake.clear()
            batch = list(self.queue)
            self.queue.clear()
            for key in batch:
                try:
                    self._sync(key)
                except ApiError as e:
                    if e.code not in (404, 409):
                        log.warning("kubelet sync of %s/%s: %s", key[0], key[1], e.message)
                except Exception:
                    log.exception("kubelet sync of %s/%s failed", key[0], key[1])

    # ---- the pod state machine ----------------------------------------------------------------------------

    def _write(self, pod: Obj, status: dict[str, Any]) -> Obj:
        new = dict(pod, status=status)
        new["metadata"] = dict(pod["metadata"], resourceVersion=str(self.store.next_rv()))
        self.store.put(PODS, new, pod)
        return new

    def _sync(self, key: tuple[str, str]) -> None:
        pod = self.store.get(PODS, *key)
        if pod is None:
            return
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or node in self.frozen:
            return
        run = self.runs.get(key)
        if run is not None and run.uid != pod["metadata"]["uid"]:
            self._cancel(run)
            run = None
        if pod["metadata"].get("deletionTimestamp"):
            self._terminate(pod, run)
            return
        phase = (pod.get("status") or {}).get("phase")
        if run is None:
            if phase in ("Succeeded", "Failed"):
                return
            run = self.runs[key] = PodRun(key[0], key[1], pod["metadata"]["uid"], node)
            self._start_pod(pod, run)
            return
        if run.done:
            return
        ann = pod["metadata"].get("annotations") or {}
        plan = (ann.get(EXIT_CODE), ann.get(RUN_SECONDS))
        if plan != run.plan:
            run.plan = plan
            self._plan_exits(pod, run)

    def _ip_for(self, pod: Obj, node: str) -> str:
        if (pod.get("spec") or {}).get("hostNetwork"):
            return self.node_ips.get(node, "127.0.0.1")
        ip = (pod.get("status") or {}).get("podIP")
        return ip if ip else self.pod_ips.take()

    def _start_pod(self, pod: Obj, run: PodRun) -> None:
        spec = pod.get("spec") or {}
        now = time.time()
        ts = iso_at(now)
        status = dict(pod.get("status") or {})
        host_ip = self.node_ips.get(run.node, "127.0.0.1")
        pod_ip = self._ip_for(pod, run.node)
        status.update(
            phase="Running",
            hostIP=host_ip,
            hostIPs=[{"ip": host_ip}],
            podIP=pod_ip,
            podIPs=[{"ip": pod_ip}],
            startTime=status.get("startTime") or ts,
        )
        if spec.get("initContainers"):
            status["initContainerStatuses"] = [
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": _image_id(c),
                    "ready": True,
                    "started": False,
                    "restartCount": 0,
                    "containerID": _cid(run, c["name"], 0),
                    "state": {
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": ts,
                            "finishedAt": ts,
                            "containerID": _cid(run, c["name"], 0),
                        }
                    },
                }
                for c in spec["initContainers"]
            ]
        statuses = []
        for c in spec.get("containers") or []:
            name = c["name"]
            run.started[name] = now
            statuses.append(self._running_status(c, run, 0, ts, None))
            self.logs.start((run.ns, run.name, name))
            self.logs.write(
                (run.ns, run.name, name),
                f"[simulated] container {name} started (image {c.get('image', '')}) on {run.node}",
            )
        status["containerStatuses"] = statuses
        status["conditions"] = _conditions(status, ready=True)
        pod = self._write(pod, status)
        ann = pod["metadata"].get("annotations") or {}
        run.plan = (ann.get(EXIT_CODE), ann.get(RUN_SECONDS))
        self._plan_exits(pod, run)

    @staticmethod
    def _running_status(c: Obj, run: PodRun, restarts: int, ts: str, last: Obj | None) -> Obj:
        st = {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": _image_id(c),
            "ready": True,
            "started": True,
            "restartCount": restarts,
            "containerID": _cid(run, c["name"], restarts),
            "state": {"running": {"startedAt": ts}},
            "lastState": last or {},
        }
        return st

    def _plan_exits(self, pod: Obj, run: PodRun) -> None:
        for t in run.timers.values():
            t.cancel()
        run.timers.clear()
        code = _annotation_float(pod, EXIT_CODE)
        secs = _annotation_float(pod, RUN_SECONDS)
        if code is None and secs is None:
            return
        loop = asyncio.get_running_loop()
        for name, started in run.started.items():
            delay = max(0.0, started + (secs or 0.0) - time.time())
            run.timers[name] = loop.call_later(delay, self._exit, run, name, int(code or 0))

    def _exit(self, run: PodRun, container: str, code: int) -> None:
        run.timers.pop(container, None)
        if run.node in self.frozen or run.done:
            return
        pod = self.store.get(PODS, run.ns, run.name)
        if pod is None or pod["metadata"].get("uid") != run.uid or pod["metadata"].get("deletionTimestamp"):
            return
        key = (run.ns, run.name, container)
        self.logs.write(key, f"[simulated] container {container} exiting with code {code}")
        self.logs.close(key)
        status = dict(pod.get("status") or {})
        statuses = [dict(s) for s in status.get("containerStatuses") or []]
        now = time.time()
        term = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": iso_at(run.started.get(container, now)),
            "finishedAt": iso_at(now),
        }
        policy = (pod.get("spec") or {}).get("restartPolicy", "Always")
        restart = policy == "Always" or (policy == "OnFailure" and code != 0)
        for s in statuses:
            if s["name"] != container:
                continue
            term["containerID"] = s.get("containerID", "")
            s["ready"] = False
            s["started"] = False
            if restart:
                s["lastState"] = {"terminated": term}
                s["state"] = {
                    "waiting": {
                        "reason": "CrashLoopBackOff" if code else "Completed",
                        "message": f"back-off restarting failed container {container}",
                    }
                }
            else:
                s["state"] = {"terminated": term}
        status["containerStatuses"] = statuses
        run.started.pop(container, None)
        if not restart and not run.started:
            codes = [s["state"].get("terminated", {}).get("exitCode", 0) for s in statuses]
            status["phase"] = "Succeeded" if all(c == 0 for c in codes) else "Failed"
            run.done = True
        status["conditions"] = _conditions(status, ready=False, terminal=run.done)
        self._write(pod, status)
        if restart:
            restarts = next((s.get("restartCount", 0) for s in statuses if s["name"] == container), 0)
            backoff = min(self.max_backoff, self.restart_backoff * (2**restarts))
            run.timers[container] = asyncio.get_running_loop().call_later(backoff, self._restart, run, container)
        # A terminal pod keeps its IP in status until deleted, as in the real cluster.

    def _restart(self, run: PodRun, container: str) -> None:
        run.timers.pop(container, None)
        if run.node in self.frozen or run.done:
            return
        pod = self.store.get(PODS, run.ns, run.name)
        if pod is None or pod["metadata"].get("uid") != run.uid or pod["metadata"].get("deletionTimestamp"):
            return
        spec_c = next((c for c in (pod.get("spec") or {}).get("containers") or [] if c["name"] == container), None)
        if spec_c is None:
            return
        status = dict(pod.get("status") or {})
        statuses = [dict(s) for s in status.get("containerStatuses") or []]
        now = time.time()
        for i, s in enumerate(statuses):
            if s["name"] == container:
                restarts = int(s.get("restartCount", 0)) + 1
                statuses[i] = self._running_status(spec_c, run, restarts, iso_at(now), s.get("lastState"))
        run.started[container] = now
        self.logs.start((run.ns, run.name, container))
        self.logs.write((run.ns, run.name, container), f"[simulated] container {container} restarted")
        status["containerStatuses"] = statuses
        status["conditions"] = _conditions(status, ready=all(s.get("ready") for s in statuses))
        pod = self._write(pod, status)
        self._plan_exits_one(pod, run, container)

    def _plan_exits_one(self, pod: Obj, run: PodRun, container: str) -> None:
        code = _annotation_float(pod, EXIT_CODE)
        secs = _annotation_float(pod, RUN_SECONDS)
        if code is None and secs is None:
            return
        run.timers[container] = asyncio.get_running_loop().call_later(
            max(0.0, secs or 0.0), self._exit, run, container, int(code or 0)
        )

    def _terminate(self, pod: Obj, run: PodRun | None) -> None:
        """A pod with deletionTimestamp: stop containers, report, then confirm deletion (grace 0)."""
        if run is not None and run.stopping is not None:
            return
        grace = float(pod["metadata"].get("deletionGracePeriodSeconds") or 0)
        delay = _annotation_float(pod, TERMINATION_SECONDS)
        delay = min(grace, self.termination_seconds if delay is None else delay)
        if run is None:
            run = self.runs[(pod["metadata"]["namespace"], pod["metadata"]["name"])] = PodRun(
                pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"], pod["spec"]["nodeName"]
            )
        for t in run.timers.values():
            t.cancel()
        run.timers.clear()
        if not run.done:
            events.record(
                self.registry,
                pod,
                "Normal",
                "Killing",
                "Stopping container " + ", ".join(c["name"] for c in (pod.get("spec") or {}).get("containers") or []),
                component="kubelet",
                host=run.node,
            )
        run.stopping = asyncio.get_running_loop().call_later(delay, self._stopped, run)

    def _stopped(self, run: PodRun) -> None:
        run.stopping = None
        if run.node in self.frozen:
            return
        pod = self.store.get(PODS, run.ns, run.name)
        if pod is None or pod["metadata"].get("uid") != run.uid:
            return
        if not run.done and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
            status = dict(pod.get("status") or {})
            statuses = []
            now = iso_at(time.time())
            for s0 in status.get("containerStatuses") or []:
                s = dict(s0)
                if "running" in (s.get("state") or {}) or "waiting" in (s.get("state") or {}):
                    s["state"] = {
                        "terminated": {
                            "exitCode": 143,
                            "reason": "Error",
                            "startedAt": (s.get("state", {}).get("running") or {}).get("startedAt", now),
                            "finishedAt": now,
                            "containerID": s.get("containerID", ""),
                        }
                    }
                    s["ready"] = False
                    s["started"] = False
                statuses.append(s)
                self.logs.close((run.ns, run.name, s["name"]))
            status["containerStatuses"] = statuses
            codes = [s["state"].get("terminated", {}).get("exitCode", 0) for s in statuses]
            status["phase"] = "Succeeded" if all(c == 0 for c in codes) else "Failed"
            status["conditions"] = _conditions(status, ready=False, terminal=True)
            pod = self._write(pod, status)
            run.done = True
        try:
            self.registry.delete(
                self.registry.resource("", "pods"),
                run.ns,
                run.name,
                {"gracePeriodSeconds": 0, "preconditions": {"uid": run.uid}},
            )
        except ApiError as e:
            if e.code not in (404, 409):
                raise

    # ---- test hooks ---------------------------------------------------------------------------------------

    def evict(self, ns: str, name: str, message: str) -> Obj:
        """Evict as the kubelet does under node pressure: phase Failed, reason Evicted; the pod stays."""
        pod = self.store.get(PODS, ns, name)
        if pod is None:
            raise ApiError(404, f'pods "{name}" not found', "NotFound")
        run = self.runs.get((ns, name))
        if run is not None:
            self._cancel(run)
            run.done = True
            run.started.clear()
        now = iso_at(time.time())
        status = dict(pod.get("status") or {})
        statuses = []
        for s0 in status.get("containerStatuses") or []:
            s = dict(s0)
            s["state"] = {
                "terminated": {
                    "exitCode": 137,
                    "reason": "Error",
                    "startedAt": ((s.get("state") or {}).get("running") or {}).get("startedAt", now),
                    "finishedAt": now,
                    "containerID": s.get("containerID", ""),
                }
            }
            s["ready"] = False
            s["started"] = False
            statuses.append(s)
            self.logs.close((ns, name, s["name"]))
        status.update(phase="Failed", reason="Evicted", message=message, containerStatuses=statuses)
        conds = _conditions(status, ready=False, terminal=True)
        conds.append(
            {
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "TerminationByKubelet",
                "message": message,
                "lastProbeTime": None,
                "lastTransitionTime": now,
            }
        )
        status["conditions"] = conds
        new = self._write(pod, status)
        events.record(
            self.registry,
            new,
            "Warning",
            "Evicted",
            message,
            component="kubelet",
            host=(pod.get("spec") or {}).get("nodeName", ""),
        )
        return new


def _cid(run: PodRun, container: str, restarts: int) -> str:
    h = hashlib.sha256(f"{run.uid}/{container}/{restarts}".encode()).hexdigest()
    return f"simulated://{h[:32]}"


def _image_id(c: Obj) -> str:
    return "simulated://" + hashlib.sha256(str(c.get("image", "")).encode()).hexdigest()[:16]


def _conditions(status: Obj, ready: bool, terminal: bool = False) -> list[Obj]:
    now = now_iso()
    old = {c.get("type"): c for c in status.get("conditions") or []}

    def cond(t: str, ok: bool, reason: str | None = None) -> Obj:
        s = "True" if ok else "False"
        prev = old.get(t)
        c: Obj = {
            "type": t,
            "status": s,
            "lastProbeTime": None,
            "lastTransitionTime": prev.get("lastTransitionTime", now) if prev and prev.get("status") == s else now,
        }
        if reason and not ok:
            c["reason"] = reason
        return c

    reason = "PodCompleted" if terminal else "ContainersNotReady"
    out = [
        cond("PodReadyToStartContainers", not terminal),
        cond("Initialized", True),
        cond("Ready", ready, reason),
        cond("ContainersReady", ready, reason),
        cond("PodScheduled", True),
    ]
    return out
