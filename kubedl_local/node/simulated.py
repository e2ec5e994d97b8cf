"""The simulated runtime: pods "run" as timers, for scale and integration tests.

Bound pods become Running with the status fields a real kubelet reports (containerStatuses, podIP, hostIP,
startTime, conditions), a few log lines are "written" (served by the kubelet endpoint), and per-pod
annotations decide how they end:

- ``local.kubedl.io/exit-code``: the exit code of every container (default: containers never exit);
- ``local.kubedl.io/exit-codes``: the exit codes of successive runs of each container, comma-separated
  (``137,0``: the first run is killed, the one restarted in place succeeds; ``-``: that run does not exit);
  runs past the list repeat its last; it takes precedence over ``exit-code``;
- ``local.kubedl.io/run-seconds``: how long containers run before exiting (default 0 with an exit code;
  with only run-seconds the exit code is 0);
- ``local.kubedl.io/termination-seconds``: how long containers take to stop after deletion (default
  ``termination_seconds``, capped at the grace period; the pod shows ``deletionTimestamp`` meanwhile).
- ``local.kubedl.io/image-pull``: ``fail`` makes every image of the pod unpullable: the pod stays Pending
  with its containers waiting in ``ImagePullBackOff``, as a kubelet reports an image that does not exist.

Restarts are the kubelet's (``restarts.should_restart``: the container's own ``restartPolicy`` and
``restartPolicyRules``, else the pod's ``restartPolicy``): a restarted container comes back in the same pod
(restartCount+1 after a doubling back-off); once no container will run again the pod is Succeeded/Failed.
An exit matching a ``RestartAllContainers`` rule restarts the pod whole, as kubelet 1.37 does: the exit is
shown with the pod's ``AllContainersRestarting`` condition, then every container (init ones too) is removed
(waiting ``RestartingAllContainers``, restartCount+1) and the pod initialises again (Pending while an init
container runs); the nodes declare ``RestartAllContainersOnContainerExits``.

The in-place restart agent's two programs (``kubedl_py.agent``: the barrier init container and the watcher
sidecar) are run by their decisions, on the pod's annotations as its downward API volume would show them:
the barrier holds the pod Pending until its attempt is released, the watcher exits 86 once the job is past it.

Why it is cheap enough for 10,000 pods on hundreds of nodes: the agent has one watch for all its nodes;
changes are queued and handled in batches by one task; containers are ``call_later`` timers, not tasks;
status goes through the agent's status writer, which coalesces bursts into one PATCH per pod. Nothing polls.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time
from dataclasses import dataclass, field
from typing import Any

from kubedl_local.node.agent import NodeAgent, Runtime, SyncQueue, now_iso
from kubedl_local.node.logs import LogError, LogStream, MemoryLogs
from kubedl_local.node.restarts import matching_rule, should_restart
from kubedl_local.node.spec import SIMULATED_POD_CIDR, IPPool
from kubedl_local.node.status import all_containers_restarting, pod_conditions
from kubedl_local.node.termination import termination_message
from kubedl_py import agent as restart_agent
from kubedl_py.kube.claims import claim_names

log = logging.getLogger(__name__)

Obj = dict[str, Any]
EXIT_CODE = "local.kubedl.io/exit-code"
RUN_SECONDS = "local.kubedl.io/run-seconds"
TERMINATION_SECONDS = "local.kubedl.io/termination-seconds"
IMAGE_PULL = "local.kubedl.io/image-pull"
EXIT_CODES = "local.kubedl.io/exit-codes"
#: the timer of a pending restart of a pod whole (beside the containers' exit timers)
RESTART_ALL = "*restart-all*"


def iso_at(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


@dataclass
class PodRun:
    """The runtime's memory of one pod it runs."""

    ns: str
    name: str
    uid: str
    node: str
    status: Obj = field(default_factory=dict)  # what we last asked the status writer to write
    started: dict[str, float] = field(default_factory=dict)  # container -> start time of current instance
    timers: dict[str, asyncio.TimerHandle] = field(default_factory=dict)
    stopping: asyncio.TimerHandle | None = None
    plan: tuple[str | None, ...] = (None, None, None)  # annotations the exit timers were planned from
    done: bool = False
    #: the in-place agent's pod attempt (its emptyDir), and whether its barrier holds the pod
    attempt: int | None = None
    holding: bool = False


def _annotation_float(pod: Obj, key: str) -> float | None:
    v = (pod["metadata"].get("annotations") or {}).get(key)
    if v is None:
        return None
    try:
        return float(v)
    except ValueError:
        return None


class SimulatedRuntime(Runtime):
    """All simulated pods of one agent (any number of nodes)."""

    runtime_version = "simulated://1.0"

    def __init__(
        self,
        *,
        pod_cidr: str = SIMULATED_POD_CIDR,
        restart_backoff: float = 0.1,
        max_backoff: float = 2.0,
        termination_seconds: float = 0.1,
    ) -> None:
        self.logs = MemoryLogs()
        self.pod_ips = IPPool(pod_cidr)
        self.restart_backoff = restart_backoff
        self.max_backoff = max_backoff
        self.termination_seconds = termination_seconds
        self.runs: dict[tuple[str, str], PodRun] = {}
        self.queue = SyncQueue("simulated")
        self._task: asyncio.Task[None] | None = None
        self._prepares: set[asyncio.Task[object]] = set()  # DRA claims being prepared (device status)

    # ---- lifecycle ----------------------------------------------------------------------------------------

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="simulated-runtime")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        for t in self._prepares:
            t.cancel()
        await asyncio.gather(*self._prepares, return_exceptions=True)
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
        for run in self.runs.values():
            if run.node == node:
                self._cancel(run)

    def thaw(self, node: str) -> None:
        for run in self.runs.values():
            if run.node == node:
                run.plan = (None, "resync", None)  # re-plan exits from the annotations
                self.queue.add(run.ns, run.name)  # and act on what changed meanwhile

    def node_removed(self, node: str) -> None:
        for key, run in list(self.runs.items()):
            if run.node == node:
                self._cancel(run)
                del self.runs[key]

    # ---- events -------------------------------------------------------------------------------------------

    def pod_changed(self, pod: Obj) -> None:
        md = pod["metadata"]
        if not (pod.get("spec") or {}).get("hostNetwork"):
            self.pod_ips.mark((pod.get("status") or {}).get("podIP"))  # after a restart: IPs in use stay taken
        self.queue.add(md["namespace"], md["name"])

    def pod_deleted(self, pod: Obj) -> None:
        md = pod["metadata"]
        key = (md["namespace"], md["name"])
        run = self.runs.get(key)
        if run is not None and run.uid == md.get("uid"):
            self._cancel(run)
            del self.runs[key]
        if not (pod.get("spec") or {}).get("hostNetwork"):
            self.pod_ips.give((pod.get("status") or {}).get("podIP"))
        if key not in self.runs:
            self.logs.forget_pod(*key)

    async def _run(self) -> None:
        await self.queue.drain(self._sync)

    # ---- the pod state machine ----------------------------------------------------------------------------

    def _write(self, pod: Obj, run: PodRun, status: Obj) -> None:
        run.status = status
        self.agent.status.set(pod, status)

    def _sync(self, key: tuple[str, str]) -> None:
        pod = self.agent.pod(*key)
        if pod is None:
            return
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or self.agent.is_frozen(node):
            return
        run = self.runs.get(key)
        if run is not None and run.uid != pod["metadata"]["uid"]:
            self._cancel(run)
            run = None
            del self.runs[key]
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
        if _has_agent(pod) and run.attempt is not None:
            if run.holding and restart_agent.released(run.attempt, _ann_int(pod, restart_agent.ANNOTATION_RELEASED)):
                self._release(pod, run)
                return
            job_attempt = _ann_int(pod, restart_agent.ANNOTATION_ATTEMPT)
            restarting = RESTART_ALL in run.timers
            if not run.holding and not restarting and restart_agent.told_to_restart(run.attempt, job_attempt):
                self.logs.write(
                    (run.ns, run.name, restart_agent.WATCHER),
                    f"the job is at attempt {job_attempt}, this pod at {run.attempt}: restarting the pod",
                )
                self._restart_all(pod, run, restart_agent.WATCHER, restart_agent.RESTART_EXIT_CODE)
                return
        ann = pod["metadata"].get("annotations") or {}
        plan = _plan_of(ann)
        if plan != run.plan:
            run.plan = plan
            self._plan_exits(pod, run)

    def _node_ip(self, node: str) -> str:
        spec = self.agent.node(node)
        return spec.ip if spec is not None else "127.0.0.1"

    def _start_pod(self, pod: Obj, run: PodRun) -> None:
        spec = pod.get("spec") or {}
        now = time.time()
        ts = iso_at(now)
        status = dict(pod.get("status") or {})
        if (pod["metadata"].get("annotations") or {}).get(IMAGE_PULL) == "fail":
            self._image_pull_failed(pod, run, status)
            return
        if claim_names(pod):  # nothing runs, but the driver reports the claims' devices as prepared
            task: asyncio.Task[object] = asyncio.create_task(self.agent.dra.prepare(pod, run.node))
            self._prepares.add(task)
            task.add_done_callback(self._prepares.discard)
        host_ip = self._node_ip(run.node)
        pod_ip = host_ip if spec.get("hostNetwork") else status.get("podIP") or self.pod_ips.take()
        status.update(
            hostIP=host_ip,
            hostIPs=[{"ip": host_ip}],
            podIP=pod_ip,
            podIPs=[{"ip": pod_ip}],
            startTime=status.get("startTime") or ts,
        )
        if _has_agent(pod):
            run.attempt = restart_agent.next_attempt(None, _ann_int(pod, restart_agent.ANNOTATION_CREATED))
            if not restart_agent.released(run.attempt, _ann_int(pod, restart_agent.ANNOTATION_RELEASED)):
                self._hold(pod, run, status)
                return
        self._run_containers(pod, run, status, now)

    def _init_statuses(self, pod: Obj, run: PodRun, ts: str, old: list[Obj], *, holding: bool) -> list[Obj]:
        """The init containers' statuses: done (a sidecar running), or the barrier running while it holds."""
        previous = {s.get("name"): s for s in old}
        out = []
        for c in (pod.get("spec") or {}).get("initContainers") or []:
            before = previous.get(c["name"]) or {}
            restarts = int(before.get("restartCount") or 0)
            cid = _cid(run, c["name"], restarts)
            entry: Obj = {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": _image_id(c),
                "restartCount": restarts,
                "containerID": cid,
                "lastState": before.get("lastState") or {},
            }
            sidecar = c.get("restartPolicy") == "Always"
            if holding and c["name"] == restart_agent.BARRIER:
                entry.update(ready=False, started=True, state={"running": {"startedAt": ts}})
            elif holding and sidecar and c["name"] == restart_agent.WATCHER:
                entry.update(ready=False, started=False, state={"waiting": {"reason": "PodInitializing"}})
            elif sidecar:
                entry.update(ready=True, started=True, state={"running": {"startedAt": ts}})
            else:
                entry.update(
                    ready=True,
                    started=False,
                    state={
                        "terminated": {
                            "exitCode": 0,
                            "reason": "Completed",
                            "startedAt": ts,
                            "finishedAt": ts,
                            "containerID": cid,
                        }
                    },
                )
            out.append(entry)
        return out

    def _run_containers(self, pod: Obj, run: PodRun, status: Obj, now: float) -> None:
        """Start the pod's containers (their restart counts and last states kept: after a restart whole)."""
        spec = pod.get("spec") or {}
        ts = iso_at(now)
        run.holding = False
        status["phase"] = "Running"
        if spec.get("initContainers"):
            status["initContainerStatuses"] = self._init_statuses(
                pod, run, ts, status.get("initContainerStatuses") or [], holding=False
            )
        previous = {s.get("name"): s for s in status.get("containerStatuses") or []}
        statuses = []
        for c in spec.get("containers") or []:
            name = c["name"]
            before = previous.get(name) or {}
            run.started[name] = now
            statuses.append(_running_status(c, run, int(before.get("restartCount") or 0), ts, before.get("lastState")))
            self.logs.start((run.ns, run.name, name))
            self.logs.write(
                (run.ns, run.name, name),
                f"[simulated] container {name} started (image {c.get('image', '')}) on {run.node}",
            )
        status["containerStatuses"] = statuses
        status["conditions"] = _conditions(status, ready=True)
        self._write(pod, run, status)
        ann = pod["metadata"].get("annotations") or {}
        run.plan = _plan_of(ann)
        self._plan_exits(pod, run)

    def _hold(self, pod: Obj, run: PodRun, status: Obj) -> None:
        """The barrier holds the pod: Pending, the barrier running, the containers waiting."""
        run.holding = True
        ts = iso_at(time.time())
        status["phase"] = "Pending"
        status["initContainerStatuses"] = self._init_statuses(
            pod, run, ts, status.get("initContainerStatuses") or [], holding=True
        )
        previous = {s.get("name"): s for s in status.get("containerStatuses") or []}
        statuses = []
        for c in (pod.get("spec") or {}).get("containers") or []:
            before = previous.get(c["name"]) or {}
            statuses.append(
                {
                    "name": c["name"],
                    "image": c.get("image", ""),
                    "imageID": "",
                    "ready": False,
                    "started": False,
                    "restartCount": int(before.get("restartCount") or 0),
                    "state": before.get("state")
                    if "waiting" in (before.get("state") or {})
                    else {"waiting": {"reason": "PodInitializing"}},
                    "lastState": before.get("lastState") or {},
                }
            )
        status["containerStatuses"] = statuses
        status["conditions"] = _conditions(status, ready=False)
        key = (run.ns, run.name, restart_agent.BARRIER)
        self.logs.start(key)
        attempt = run.attempt or 0
        self.logs.write(key, f"attempt {attempt}: waiting until every rank has stopped attempt {attempt - 1}")
        self._write(pod, run, status)

    def _release(self, pod: Obj, run: PodRun) -> None:
        key = (run.ns, run.name, restart_agent.BARRIER)
        self.logs.write(key, f"attempt {run.attempt} released: starting")
        self.logs.close(key)
        self._run_containers(pod, run, dict(run.status), time.time())

    def _restart_all(self, pod: Obj, run: PodRun, source: str, code: int) -> None:
        """RestartAllContainers (kubelet 1.37): the exit shown with ``AllContainersRestarting``, then every
        container removed (after :attr:`restart_backoff`) and the pod initialised again."""
        for t in run.timers.values():
            t.cancel()
        run.timers.clear()
        now = time.time()
        status = dict(run.status)
        statuses = [dict(s) for s in status.get("containerStatuses") or []]
        for s in statuses:
            if s["name"] == source:
                s.update(
                    ready=False,
                    started=False,
                    state={
                        "terminated": {
                            "exitCode": code,
                            "reason": "Error",
                            "startedAt": iso_at(run.started.get(source, now)),
                            "finishedAt": iso_at(now),
                            "containerID": s.get("containerID", ""),
                        }
                    },
                )
        status["containerStatuses"] = statuses
        status["conditions"] = _conditions(status, ready=False, restarting=True)
        self._write(pod, run, status)
        self.agent.event(pod, "Normal", "Killing", f"Container {source} exited: restarting all containers")
        run.timers[RESTART_ALL] = asyncio.get_running_loop().call_later(self.restart_backoff, self._reinitialise, run)

    def _reinitialise(self, run: PodRun) -> None:
        run.timers.pop(RESTART_ALL, None)
        pod = self._live(run)
        if pod is None:
            return
        status = dict(run.status)
        removed = {
            "waiting": {
                "reason": "RestartingAllContainers",
                "message": "The container is removed because RestartAllContainers in place",
            }
        }
        last = {
            "terminated": {
                "exitCode": 137,
                "reason": "RestartingAllContainers",
                "message": "The container is removed because RestartAllContainers in place",
            }
        }
        for field_name in ("initContainerStatuses", "containerStatuses"):
            entries = []
            for s0 in status.get(field_name) or []:
                s = dict(s0)
                s.update(
                    ready=False,
                    started=False,
                    restartCount=int(s.get("restartCount") or 0) + 1,
                    state=dict(removed),
                    lastState=dict(last),
                )
                self.logs.close((run.ns, run.name, s["name"]))
                entries.append(s)
            if entries:
                status[field_name] = entries
        run.started.clear()
        status["conditions"] = _conditions(status, ready=False)
        if _has_agent(pod):
            run.attempt = restart_agent.next_attempt(run.attempt, _ann_int(pod, restart_agent.ANNOTATION_ATTEMPT))
            if not restart_agent.released(run.attempt, _ann_int(pod, restart_agent.ANNOTATION_RELEASED)):
                self._hold(pod, run, status)
                return
        self._run_containers(pod, run, status, time.time())

    def _image_pull_failed(self, pod: Obj, run: PodRun, status: Obj) -> None:
        """What a kubelet reports for images it cannot pull: Pending, every container waiting in back-off."""
        spec = pod.get("spec") or {}
        host_ip = self._node_ip(run.node)
        status.update(
            phase="Pending", hostIP=host_ip, hostIPs=[{"ip": host_ip}], startTime=status.get("startTime") or now_iso()
        )
        status["containerStatuses"] = [
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {
                    "waiting": {
                        "reason": "ImagePullBackOff",
                        "message": f'Back-off pulling image "{c.get("image", "")}": not found in any registry',
                    }
                },
            }
            for c in spec.get("containers") or []
        ]
        status["conditions"] = pod_conditions(status, ready=False, now=now_iso())
        run.done = True
        self._write(pod, run, status)

    def _plan_exits(self, pod: Obj, run: PodRun) -> None:
        if RESTART_ALL in run.timers:
            return  # planned again when the pod's containers start again
        for t in run.timers.values():
            t.cancel()
        run.timers.clear()
        secs = _annotation_float(pod, RUN_SECONDS)
        runs = {s.get("name"): int(s.get("restartCount") or 0) for s in run.status.get("containerStatuses") or []}
        loop = asyncio.get_running_loop()
        for name, started in run.started.items():
            code = _exit_code(pod, runs.get(name, 0))  # of the container's current run
            if code is None and secs is None:
                continue
            delay = max(0.0, started + (secs or 0.0) - time.time())
            run.timers[name] = loop.call_later(delay, self._exit, run, name, int(code or 0))

    def _live(self, run: PodRun) -> Obj | None:
        """The pod, if this run should still act on it (same uid, not deleting, node not lost)."""
        if self.agent.is_frozen(run.node) or run.done or self.runs.get((run.ns, run.name)) is not run:
            return None
        pod = self.agent.pod(run.ns, run.name)
        if pod is None or pod["metadata"].get("uid") != run.uid or pod["metadata"].get("deletionTimestamp"):
            return None
        return pod

    def _exit(self, run: PodRun, container: str, code: int) -> None:
        run.timers.pop(container, None)
        pod = self._live(run)
        if pod is None:
            return
        key = (run.ns, run.name, container)
        self.logs.write(key, f"[simulated] container {container} exiting with code {code}")
        self.logs.close(key)
        status = dict(run.status)
        statuses = [dict(s) for s in status.get("containerStatuses") or []]
        now = time.time()
        term: Obj = {
            "exitCode": code,
            "reason": "Completed" if code == 0 else "Error",
            "startedAt": iso_at(run.started.get(container, now)),
            "finishedAt": iso_at(now),
        }
        containers = (pod.get("spec") or {}).get("containers") or []
        spec: Obj = next((c for c in containers if c.get("name") == container), {})
        stream = self.logs.stream(key, previous=False)
        message = termination_message(spec, code, (e.text for e in stream.read()) if stream is not None else ())
        if message:
            term["message"] = message
        if spec.get("restartPolicy") is not None:
            rule = matching_rule(spec, code)
            if rule is not None and rule.get("action") == "RestartAllContainers":
                self._restart_all(pod, run, container, code)
                return
        restart = should_restart(spec, pod.get("spec") or {}, code)
        restarts = 0
        for s in statuses:
            if s["name"] != container:
                continue
            term["containerID"] = s.get("containerID", "")
            s["ready"] = False
            s["started"] = False
            restarts = int(s.get("restartCount", 0))
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
        status["conditions"] = pod_conditions(status, ready=False, terminal=run.done, now=now_iso())
        self._write(pod, run, status)
        if restart:
            backoff = min(self.max_backoff, self.restart_backoff * (2**restarts))
            if code:
                self.agent.event(pod, "Warning", "BackOff", f"Back-off restarting failed container {container}")
            run.timers[container] = asyncio.get_running_loop().call_later(backoff, self._restart, run, container)
        # A terminal pod keeps its IP in status until deleted, as in the real cluster.

    def _restart(self, run: PodRun, container: str) -> None:
        run.timers.pop(container, None)
        pod = self._live(run)
        if pod is None:
            return
        spec_c = next((c for c in (pod.get("spec") or {}).get("containers") or [] if c["name"] == container), None)
        if spec_c is None:
            return
        status = dict(run.status)
        statuses = [dict(s) for s in status.get("containerStatuses") or []]
        now = time.time()
        restarts = 0
        for i, s in enumerate(statuses):
            if s["name"] == container:
                restarts = int(s.get("restartCount", 0)) + 1
                statuses[i] = _running_status(spec_c, run, restarts, iso_at(now), s.get("lastState"))
        run.started[container] = now
        self.logs.start((run.ns, run.name, container))
        self.logs.write((run.ns, run.name, container), f"[simulated] container {container} restarted")
        status["containerStatuses"] = statuses
        status["conditions"] = pod_conditions(status, ready=all(s.get("ready") for s in statuses), now=now_iso())
        self._write(pod, run, status)
        code = _exit_code(pod, restarts)
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
        md = pod["metadata"]
        if run is None:
            run = self.runs[(md["namespace"], md["name"])] = PodRun(
                md["namespace"], md["name"], md["uid"], pod["spec"]["nodeName"], status=dict(pod.get("status") or {})
            )
            run.done = (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
        for t in run.timers.values():
            t.cancel()
        run.timers.clear()
        if not run.done:
            names = ", ".join(c["name"] for c in (pod.get("spec") or {}).get("containers") or [])
            self.agent.event(pod, "Normal", "Killing", f"Stopping container {names}")
        run.stopping = asyncio.get_running_loop().call_later(delay, self._stopped, run, pod)

    def _stopped(self, run: PodRun, pod: Obj) -> None:
        run.stopping = None
        if self.agent.is_frozen(run.node) or self.runs.get((run.ns, run.name)) is not run:
            return
        if not run.done and run.status.get("phase") not in ("Succeeded", "Failed"):
            status = dict(run.status)
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
            status["conditions"] = pod_conditions(status, ready=False, terminal=True, now=now_iso())
            self._write(pod, run, status)
            run.done = True
        self.agent.status.confirm_deletion(pod)

    # ---- hooks and logs -----------------------------------------------------------------------------------

    async def evict(self, pod: Obj, message: str) -> None:
        """Evict as the kubelet does under node pressure: phase Failed, reason Evicted; the pod stays."""
        md = pod["metadata"]
        key = (md["namespace"], md["name"])
        run = self.runs.get(key)
        if run is None or run.uid != md["uid"]:
            run = self.runs[key] = PodRun(key[0], key[1], md["uid"], pod["spec"]["nodeName"])
            run.status = dict(pod.get("status") or {})
        self._cancel(run)
        run.done = True
        run.started.clear()
        now = iso_at(time.time())
        status = dict(run.status)
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
            self.logs.close((key[0], key[1], s["name"]))
        status.update(phase="Failed", reason="Evicted", message=message, containerStatuses=statuses)
        conds = pod_conditions(status, ready=False, terminal=True, now=now_iso())
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
        self._write(pod, run, status)
        self.agent.event(pod, "Warning", "Evicted", message)

    def log_stream(self, pod: Obj, container: str, previous: bool) -> LogStream:
        md = pod["metadata"]
        stream = self.logs.stream((md["namespace"], md["name"], container), previous=previous)
        if stream is None:
            if previous:
                raise LogError(400, f'previous terminated container "{container}" in pod "{md["name"]}" not found')
            raise LogError(400, f'container "{container}" in pod "{md["name"]}" is waiting to start: ContainerCreating')
        return stream


def _conditions(status: Obj, *, ready: bool, restarting: bool = False) -> list[Obj]:
    """The kubelet's pod conditions, with ``AllContainersRestarting`` once a pod has restarted whole (True
    while it does: kubelet 1.37)."""
    now = now_iso()
    conditions = pod_conditions(status, ready=ready, now=now)
    restart = all_containers_restarting(status, restarting=restarting, now=now)
    return conditions if restart is None else [*conditions, restart]


def _has_agent(pod: Obj) -> bool:
    """Whether the pod carries the in-place restart agent (``kubedl_py.agent``)."""
    return any(c.get("name") == restart_agent.BARRIER for c in (pod.get("spec") or {}).get("initContainers") or [])


def _ann_int(pod: Obj, key: str) -> int:
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(key)
    try:
        return int(value) if value is not None else 0
    except ValueError:
        return 0


def _plan_of(annotations: dict[str, str]) -> tuple[str | None, ...]:
    """The annotations that decide how a pod's containers end (a change re-plans them)."""
    return annotations.get(EXIT_CODE), annotations.get(RUN_SECONDS), annotations.get(EXIT_CODES)


def _exit_code(pod: Obj, run: int) -> float | None:
    """How run ``run`` (0: the first) of a container ends: ``exit-codes`` by run, else ``exit-code``."""
    listed = ((pod.get("metadata") or {}).get("annotations") or {}).get(EXIT_CODES)
    if listed:
        try:
            codes = [None if code.strip() == "-" else int(code) for code in listed.split(",") if code.strip()]
        except ValueError:
            log.warning("pod %s: %s=%r is not a list of exit codes", pod["metadata"].get("name"), EXIT_CODES, listed)
            codes = []
        if codes:
            code = codes[min(run, len(codes) - 1)]
            return None if code is None else float(code)
    return _annotation_float(pod, EXIT_CODE)


def _running_status(c: Obj, run: PodRun, restarts: int, ts: str, last: Obj | None) -> Obj:
    return {
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


def _cid(run: PodRun, container: str, restarts: int) -> str:
    h = hashlib.sha256(f"{run.uid}/{container}/{restarts}".encode()).hexdigest()
    return f"simulated://{h[:32]}"


def _image_id(c: Obj) -> str:
    return "simulated://" + hashlib.sha256(str(c.get("image", "")).encode()).hexdigest()[:16]


__all__ = ["EXIT_CODE", "IMAGE_PULL", "RUN_SECONDS", "TERMINATION_SECONDS", "NodeAgent", "SimulatedRuntime"]
