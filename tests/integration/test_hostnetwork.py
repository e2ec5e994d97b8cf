"""Host-network mode end to end on a multi-node embedded cluster: ports, Services, settings, failover."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import time
from collections import Counter
from typing import Any

import pytest

from kubedl_local.faults import FaultRule
from kubedl_local.kubernetes.cluster import create_namespace
from kubedl_py.api import constants as c
from kubedl_py.kube.errors import Invalid, NotFound
from kubedl_py.kube.resources import NAMESPACES, PODS, SERVICES
from tests.integration.conftest import (
    PYTORCHJOBS,
    TFJOBS,
    Env,
    Kube,
    RunningController,
    condition,
    env_of,
    events_for,
    eventually,
    fast_options,
    job_state,
    pods_of,
    pytorchjob,
    replica,
    services_of,
    tfjob,
    wait_condition,
)
from tests.tiers import KUBERNETES

LOW, HIGH = 20000, 30000


def host_port(pod: dict[str, Any]) -> int:
    return int(pod["metadata"]["annotations"][c.ANNOTATION_HOST_PORT])


def target_port(service: dict[str, Any]) -> int:
    (port,) = service["spec"]["ports"]
    return int(port["targetPort"])


async def _n_pods(kube: Kube, job: str, n: int) -> list[dict[str, Any]] | None:
    pods = await pods_of(kube, job)
    return pods if len(pods) == n else None


async def test_tfjob_gets_host_ports_forwarding_services_and_real_tf_config(
    kube: Kube, controller: RunningController
) -> None:
    job = tfjob(
        "hps", host=True, replicas={"PS": replica(2, name="tensorflow"), "Worker": replica(3, name="tensorflow")}
    )
    await kube.create(TFJOBS, job, namespace=kube.ns)
    pods = await eventually(lambda: _n_pods(kube, "hps", 5), what="5 pods")
    ports = {p["metadata"]["name"]: host_port(p) for p in pods}
    assert len(set(ports.values())) == 5
    assert all(LOW <= port <= HIGH for port in ports.values())
    for pod in pods:
        spec = pod["spec"]
        assert spec["hostNetwork"] is True
        assert spec["dnsPolicy"] == "ClusterFirstWithHostNet"
        (declared,) = spec["containers"][0]["ports"]
        assert declared["containerPort"] == declared["hostPort"] == host_port(pod)

    services = await eventually(lambda: _n_services(kube, "hps", 5), what="5 services")
    for service in services:
        assert service["spec"]["clusterIP"] not in (None, "", "None")
        assert service["spec"]["ports"][0]["port"] == 2222
        assert target_port(service) == ports[service["metadata"]["name"]]

    ps1 = next(p for p in pods if p["metadata"]["name"] == "hps-ps-1")
    config = json.loads(env_of(ps1)["TF_CONFIG"])
    assert config["cluster"]["ps"] == [
        f"hps-ps-0.{kube.ns}.svc:2222",
        f"hps-ps-1.{kube.ns}.svc:{ports['hps-ps-1']}",
    ]
    assert config["cluster"]["worker"] == [f"hps-worker-{i}.{kube.ns}.svc:2222" for i in range(3)]
    assert config["task"] == {"type": "ps", "index": 1}


async def _n_services(kube: Kube, job: str, n: int) -> list[dict[str, Any]] | None:
    services = await services_of(kube, job)
    return services if len(services) == n else None


async def test_pytorch_master_listens_on_its_host_port_workers_use_the_service(
    kube: Kube, controller: RunningController
) -> None:
    await kube.create(PYTORCHJOBS, pytorchjob("hddp", host=True), namespace=kube.ns)
    pods = await eventually(lambda: _n_pods(kube, "hddp", 3), what="3 pods")
    master = next(p for p in pods if p["metadata"]["name"] == "hddp-master-0")
    worker = next(p for p in pods if p["metadata"]["name"] == "hddp-worker-1")
    m, w = env_of(master), env_of(worker)
    assert (m["MASTER_ADDR"], m["MASTER_PORT"]) == ("localhost", str(host_port(master)))
    assert (m["PET_MASTER_ADDR"], m["PET_MASTER_PORT"]) == ("localhost", str(host_port(master)))
    assert (w["MASTER_ADDR"], w["MASTER_PORT"]) == ("hddp-master-0", "23456")
    assert (w["PET_MASTER_ADDR"], w["PET_MASTER_PORT"]) == ("hddp-master-0", "23456")


async def _changed_events(kube: Kube, job: str) -> list[dict[str, Any]] | None:
    return [e for e in await events_for(kube, job) if e["reason"] == "HostPortChanged"] or None


def _stopping_in(seconds: float, replicas: int = 2) -> dict[str, Any]:
    """Workers whose containers take ``seconds`` to stop after their pod's deletion (the node agent's
    termination time): the old pod of a failover stays terminating that long."""
    spec = replica(replicas)
    spec["template"]["metadata"] = {"annotations": {"local.kubedl.io/termination-seconds": str(seconds)}}
    return spec


async def _service(kube: Kube, name: str) -> dict[str, Any]:
    return next(s for s in await services_of(kube, name.rsplit("-", 2)[0]) if s["metadata"]["name"] == name)


@pytest.mark.parametrize("grace", [None, 0], ids=["graceful", "forced"])
async def test_failover_gets_a_new_port_and_the_service_is_repointed_first(
    cluster: Env, kube: Kube, controller: RunningController, grace: int | None
) -> None:
    # No Master: worker 0 hosts the rendezvous, the one replica its peers dial, and the only Service.
    replicas = {"Worker": _stopping_in(12, 3)}
    await kube.create(PYTORCHJOBS, pytorchjob("fo", host=True, replicas=replicas), namespace=kube.ns)
    pods = await eventually(lambda: _n_pods(kube, "fo", 3), what="3 pods")
    services = await eventually(lambda: _n_services(kube, "fo", 1), what="worker 0's Service")
    assert services[0]["metadata"]["name"] == "fo-worker-0"
    old = next(p for p in pods if p["metadata"]["name"] == "fo-worker-0")
    peer_env = env_of(next(p for p in pods if p["metadata"]["name"] == "fo-worker-1"))
    assert (peer_env["MASTER_ADDR"], peer_env["MASTER_PORT"]) == ("fo-worker-0", "23456")
    cluster.request_log.clear()
    assert controller.manager is not None
    gate = controller.manager.write_gate
    assert gate.repairs == 0  # making a job's pods is not a repair: new jobs are not slowed by it
    await kube.delete(PODS, "fo-worker-0", namespace=kube.ns, grace_period_seconds=grace)

    if grace is None:
        # The old pod takes 12 s to stop; the Service is re-pointed meanwhile (read first, then the pod: the old
        # pod still existing after the re-point was seen means it existed when the re-point was made). The
        # window is wide because the real control plane on a loaded 2-core CI machine once took over 4 s.
        async def repointed_while_terminating() -> dict[str, Any] | None:
            if target_port(await _service(kube, "fo-worker-0")) == host_port(old):
                return None
            try:
                return await kube.get(PODS, "fo-worker-0", namespace=kube.ns)
            except NotFound:
                pytest.fail("the old pod was gone before its Service was re-pointed")

        still = await eventually(repointed_while_terminating, within=10.0, what="the re-point during termination")
        assert still["metadata"]["uid"] == old["metadata"]["uid"] and still["metadata"].get("deletionTimestamp")

    async def replaced() -> dict[str, Any] | None:
        for pod in await pods_of(kube, "fo"):
            if pod["metadata"]["name"] == "fo-worker-0" and pod["metadata"]["uid"] != old["metadata"]["uid"]:
                return pod
        return None

    new = await eventually(replaced, what="replacement pod")
    assert host_port(new) != host_port(old)
    # the failover opened the repair window (kubedl_py.kube.priority): new jobs go slower meanwhile
    assert gate.repairs >= 1
    assert target_port(await _service(kube, "fo-worker-0")) == host_port(new)
    # One re-point, before the replacement was created; nothing else of the job was written.
    events = await eventually(lambda: _changed_events(kube, "fo"), what="a HostPortChanged event")
    order = [
        (r.verb, r.resource, r.name)
        for r in cluster.request_log.records
        if r.status < 300
        and not r.subresource
        and ((r.verb == "patch" and r.resource == "services") or (r.verb == "create" and r.resource == "pods"))
    ]
    assert order == [("patch", "services", "fo-worker-0"), ("create", "pods", "")]
    # Peers keep their settings: nothing else was touched.
    still = next(p for p in await pods_of(kube, "fo") if p["metadata"]["name"] == "fo-worker-1")
    assert env_of(still) == peer_env
    assert f"from host port {host_port(old)} to {host_port(new)}" in events[0]["message"]


def _host_pod(name: str, ports: range, **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "hostNetwork": True,
            "containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": p} for p in ports]}],
            **spec,
        },
    }


async def _running(kube: Kube, job: str, n: int) -> list[dict[str, Any]] | None:
    pods = await pods_of(kube, job)
    running = [
        p for p in pods if p.get("status", {}).get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]
    return running if len(running) == n else None


async def test_a_pending_pod_declaring_every_port_starves_no_other_namespace(cluster: Env, kube: Kube) -> None:
    """A user of namespace A makes a host-network pod that can never be scheduled and declares every port of
    the range: a pod that is not bound holds no port anywhere, so a host-network job in namespace B runs."""
    low, high = 21100, 21111
    other = f"{kube.ns}-a"
    await create_namespace(kube, other)
    try:
        squatter = _host_pod("squatter", range(low, high + 1), nodeSelector={"kubedl.io/no-such-node": "x"})
        await kube.create(PODS, squatter, namespace=other)
        running = RunningController(cluster, fast_options(namespace=kube.ns, host_port_range=(low, high)))
        await running.start()
        try:
            await kube.create(PYTORCHJOBS, pytorchjob("victim", host=True), namespace=kube.ns)
            pods = await eventually(lambda: _running(kube, "victim", 3), within=30, what="the victim's 3 pods running")
            assert all(low <= host_port(p) <= high for p in pods)
            (job,) = [await job_state(kube, PYTORCHJOBS, "victim")]
            reasons = {cond["reason"] for cond in (job or {}).get("status", {}).get("conditions", [])}
            assert "HostPortsExhausted" not in reasons
        finally:
            await running.stop()
    finally:
        with contextlib.suppress(NotFound):
            await kube.delete(NAMESPACES, other)


async def test_a_job_asking_thousands_of_host_ports_is_refused(
    cluster: Env, kube: Kube, controller: RunningController
) -> None:
    """On the real control plane the install's admission policy refuses it at create, naming the field; where no
    policy is installed (the embedded cluster) the controller fails it as InvalidSpec and makes no pod."""
    job = pytorchjob("greedy", replicas={"Master": replica(1), "Worker": replica(1)})
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    worker["hostNetwork"] = True
    worker["nodeSelector"] = {"kubedl.io/no-such-node": "x"}
    worker["containers"][0]["ports"] = [{"containerPort": p} for p in range(20000, 30001)]
    if cluster.tier == KUBERNETES:
        with pytest.raises(Invalid) as refused:
            await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
        assert "more than 8 host ports" in str(refused.value) and "pytorchReplicaSpecs" in str(refused.value)
        return
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    failed = await wait_condition(kube, PYTORCHJOBS, "greedy", "Failed")
    message = condition(failed, "Failed")["message"]  # type: ignore[index]
    assert "spec.pytorchReplicaSpecs.Worker.template.spec.containers" in message and "10002 host ports" in message
    assert await pods_of(kube, "greedy") == []


@pytest.mark.parametrize("mode", ["Host", "hosts", "HOST "])
async def test_a_misspelt_network_mode_never_runs_in_the_other_mode(
    cluster: Env, kube: Kube, controller: RunningController, mode: str
) -> None:
    job = pytorchjob("typo")
    job["metadata"]["annotations"] = {c.ANNOTATION_NETWORK_MODE: mode}
    if cluster.tier == KUBERNETES:
        with pytest.raises(Invalid) as refused:
            await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
        text = str(refused.value)
        assert f'"{mode}" is not a network mode' in text and c.ANNOTATION_NETWORK_MODE in text and '"pod"' in text
        return
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    failed = await wait_condition(kube, PYTORCHJOBS, "typo", "Failed")
    assert f"{mode!r} is not a network mode" in condition(failed, "Failed")["message"]  # type: ignore[index]
    assert await pods_of(kube, "typo") == []


@pytest.mark.nodes(3)
async def test_a_full_range_does_not_hang_a_failover(cluster: Env, kube: Kube) -> None:
    """Every port of a 12-port range is held by the job's 12 pods: a replacement takes its own old port back
    once the old pod is gone (within 1 s) instead of waiting for a free one."""
    low, high = 21200, 21211
    running = RunningController(cluster, fast_options(namespace=kube.ns, host_port_range=(low, high)))
    await running.start()
    try:
        replicas = {"Master": replica(1), "Worker": replica(11)}
        job = pytorchjob("full", host=True, services=c.REPLICA_SERVICES_ALL, replicas=replicas)
        await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
        pods = await eventually(lambda: _running(kube, "full", 12), within=60, what="12 pods running")
        assert sorted(host_port(p) for p in pods) == list(range(low, high + 1))
        old = next(p for p in pods if p["metadata"]["name"] == "full-worker-3")
        await kube.delete(PODS, "full-worker-3", namespace=kube.ns)
        gone_at: float | None = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                pod = await kube.get(PODS, "full-worker-3", namespace=kube.ns)
            except NotFound:
                pod = None
            now = time.monotonic()
            if pod is not None and pod["metadata"]["uid"] != old["metadata"]["uid"]:
                made_after = now - (gone_at if gone_at is not None else now)
                break
            if pod is None and gone_at is None:
                gone_at = now
            await asyncio.sleep(0.02)
        else:
            raise AssertionError("no replacement of full-worker-3 within 60 s")
        assert made_after < 1.0, f"the replacement came {made_after:.2f}s after the old pod was gone"
        new = await eventually(lambda: _running(kube, "full", 12), within=60, what="12 pods running again")
        replacement = next(p for p in new if p["metadata"]["name"] == "full-worker-3")
        assert low <= host_port(replacement) <= high
        assert target_port(await _service(kube, "full-worker-3")) == host_port(replacement)
    finally:
        await running.stop()


@pytest.mark.nodes(2)
async def test_a_pod_no_node_can_take_for_its_port_gets_another(cluster: Env, kube: Kube) -> None:
    """Both nodes have host port P taken by pods the controller cannot see (pod network with a hostPort): the
    job's pod that got P is Pending for the scheduler's NodePorts reason, then gets another port."""
    low, high = 21300, 21302
    for index, node in enumerate(cluster.node_names):
        hidden = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": f"hidden-{index}"},
            "spec": {
                "nodeName": node,
                "containers": [{"name": "c", "image": "busybox", "ports": [{"containerPort": 80, "hostPort": low}]}],
            },
        }
        await kube.create(PODS, hidden, namespace=kube.ns)
    options = fast_options(namespace=kube.ns, host_port_range=(low, high), host_port_retry_after=1.0)
    running = RunningController(cluster, options)
    await running.start()
    try:
        replicas = {"Master": replica(1), "Worker": replica(2)}  # three pods: one of them gets `low`
        job = pytorchjob("moved", host=True, services=c.REPLICA_SERVICES_ALL, replicas=replicas)
        await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
        pods = await eventually(lambda: _running(kube, "moved", 3), within=60, what="3 pods running")
        assert low not in {host_port(p) for p in pods}
        events = [e for e in await events_for(kube, "moved") if e["reason"] == "HostPortReassigned"]
        assert events and f"host port {low} free" in events[0]["message"]
        for pod in pods:
            assert target_port(await _service(kube, pod["metadata"]["name"])) == host_port(pod)
    finally:
        await running.stop()


async def test_a_template_asking_for_the_host_network_gets_host_ports(
    kube: Kube, controller: RunningController
) -> None:
    job = pytorchjob("tmpl", services=c.REPLICA_SERVICES_ALL, replicas={"Master": replica(1), "Worker": replica(1)})
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["hostNetwork"] = True
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)
    pods = await eventually(lambda: _running(kube, "tmpl", 2), what="2 pods running")
    assert len({host_port(p) for p in pods}) == 2
    for pod in pods:
        assert target_port(await _service(kube, pod["metadata"]["name"])) == host_port(pod)
    reasons = [e["reason"] for e in await events_for(kube, "tmpl")]
    assert reasons.count("HostNetworkFromTemplate") == 1 and "NetworkModeChangeRefused" not in reasons


@pytest.mark.parametrize("host", [False, True], ids=["pod-network", "host-network"])
async def test_a_strangers_service_is_never_wired_to_the_job(
    kube: Kube, controller: RunningController, host: bool
) -> None:
    stranger = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "intr-master-0"},
        "spec": {"selector": {"app": "someone-else"}, "ports": [{"port": 23456}]},
    }
    await kube.create(SERVICES, stranger, namespace=kube.ns)
    await kube.create(PYTORCHJOBS, pytorchjob("intr", host=host), namespace=kube.ns)

    async def blocked() -> dict[str, Any] | None:
        job = await job_state(kube, PYTORCHJOBS, "intr")
        for cond in ((job or {}).get("status") or {}).get("conditions") or []:
            if cond["type"] == "Running" and cond["reason"] == "NameInUse":
                return cond
        return None

    cond = await eventually(blocked, what="the NameInUse condition")
    assert cond["status"] == "False" and f"Service {kube.ns}/intr-master-0" in cond["message"]
    assert "controlled by nothing" in cond["message"]
    assert [e for e in await events_for(kube, "intr") if e["reason"] == "NameInUse"]
    assert await pods_of(kube, "intr") == []  # no rank is made while the name is someone else's

    await kube.delete(SERVICES, "intr-master-0", namespace=kube.ns)
    pods = await eventually(lambda: _running(kube, "intr", 3), within=30, what="3 pods once the name is free")
    job = await job_state(kube, PYTORCHJOBS, "intr")
    assert job is not None
    service = await _service(kube, "intr-master-0")
    assert service["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    for pod in pods:
        assert env_of(pod).get("MASTER_ADDR") in ("intr-master-0", "localhost")

    async def cleared() -> bool:
        found = await job_state(kube, PYTORCHJOBS, "intr")
        return not [c for c in ((found or {}).get("status") or {}).get("conditions", []) if c["reason"] == "NameInUse"]

    await eventually(cleared, what="the NameInUse condition gone")


@pytest.mark.parametrize("host", [False, True], ids=["pod-network", "host-network"])
async def test_a_service_name_freed_while_it_is_created_is_made_before_any_pod(
    cluster: Env, kube: Kube, controller: RunningController, host: bool
) -> None:
    """The Master's Service create is refused with AlreadyExists (as when a stranger's Service of that name is
    deleted at that moment) and the controller's read then finds no Service: the name is free. The Service is
    made at once, before any pod, not left to a later reconcile while the ranks start without it (likely the race
    behind a failure of test_a_strangers_service_is_never_wired_to_the_job, CI 2026-11-27)."""
    # A create names its object in the body: the rule matches the namespace's first Service create, the Master's
    # (a PyTorchJob's only dialed replica).
    rule = FaultRule(verb="create", resource="services", namespace=kube.ns, status=409, reason="AlreadyExists")
    rule.times = 1
    cluster.faults.add(rule)
    await kube.create(PYTORCHJOBS, pytorchjob("freed", host=host), namespace=kube.ns)
    await eventually(lambda: _running(kube, "freed", 3), within=60, what="3 pods running")
    assert rule.hits == 1, "the create was never refused: the test proved nothing"
    # The log names no object of a create (it is in the body); the job is the namespace's only one.
    made = [
        r.resource
        for r in cluster.request_log.records
        if r.verb == "create" and r.status == 201 and r.namespace == kube.ns and r.resource in ("pods", "services")
    ]
    assert made and made[0] == "services", f"created, in order: {made}"
    await _service(kube, "freed-master-0")


async def test_hand_edits_of_a_jobs_service_are_undone(kube: Kube, controller: RunningController) -> None:
    await kube.create(PYTORCHJOBS, pytorchjob("edit"), namespace=kube.ns)
    await eventually(lambda: _n_services(kube, "edit", 1), what="the Master's Service")
    before = await _service(kube, "edit-master-0")
    edit = {
        "spec": {"selector": {"app": "hijack"}, "ports": [{"name": "pytorchjob-port", "port": 1234, "targetPort": 80}]}
    }
    await kube.patch(SERVICES, "edit-master-0", edit, namespace=kube.ns)

    async def repaired() -> dict[str, Any] | None:
        service = await _service(kube, "edit-master-0")
        spec = service["spec"]
        return service if spec["selector"] == before["spec"]["selector"] and spec["ports"][0]["port"] == 23456 else None

    service = await eventually(repaired, what="the Service put back")
    assert [(p["port"], p["targetPort"]) for p in service["spec"]["ports"]] == [(23456, 23456)]

    async def told() -> list[dict[str, Any]] | None:  # the event is recorded after the write it tells of
        events = [e for e in await events_for(kube, "edit") if e["reason"] == "ServiceRepaired"]
        return events or None

    events = await eventually(told, what="the ServiceRepaired event")
    assert "selector, ports" in events[0]["message"]


async def test_pods_no_node_can_take_are_named_on_the_job(kube: Kube, controller: RunningController) -> None:
    job = pytorchjob("huge")
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]
    worker["resources"] = {"requests": {"cpu": "5000"}, "limits": {"cpu": "5000"}}
    await kube.create(PYTORCHJOBS, job, namespace=kube.ns)

    async def named() -> dict[str, Any] | None:
        found = await job_state(kube, PYTORCHJOBS, "huge")
        for cond in ((found or {}).get("status") or {}).get("conditions") or []:
            # both Workers: the scheduler marks them one at a time, so the first condition may name one only
            if cond["type"] == "Running" and cond["reason"] == "Unschedulable" and "1 more pod" in cond["message"]:
                return cond
        return None

    cond = await eventually(named, within=30, what="the Unschedulable condition naming both Workers")
    assert cond["status"] == "False"
    assert cond["message"].startswith("Worker ") and "cannot be scheduled (and 1 more pods)" in cond["message"]
    assert "Insufficient cpu" in cond["message"]
    assert [e for e in await events_for(kube, "huge") if e["reason"] == "Unschedulable"]


async def test_controller_restart_changes_no_port(cluster: Env, kube: Kube) -> None:
    first = RunningController(cluster, fast_options(namespace=kube.ns))
    await first.start()
    for name in ("keep-a", "keep-b"):
        await kube.create(PYTORCHJOBS, pytorchjob(name, host=True), namespace=kube.ns)
    before: dict[str, int] = {}
    for name in ("keep-a", "keep-b"):
        pods = await eventually(lambda name=name: _n_pods(kube, name, 3), what="3 pods")
        await eventually(lambda name=name: _n_services(kube, name, 1), what="the Master's Service")
        before.update({p["metadata"]["name"]: host_port(p) for p in pods})
    await first.stop(crash=True)
    cluster.request_log.clear()
    second = RunningController(cluster, fast_options(namespace=kube.ns))
    manager = await second.start()
    try:

        async def reconciled() -> bool:
            value = manager.metrics.value("kubedl_reconcile_total", {"controller": "pytorchjobs", "result": "success"})
            return value is not None and value >= 2

        await eventually(reconciled, what="both jobs reconciled after the restart")
        after = {p["metadata"]["name"]: host_port(p) for n in ("keep-a", "keep-b") for p in await pods_of(kube, n)}
        assert after == before
        writes = [
            r
            for r in cluster.request_log.records
            if r.verb in ("patch", "create", "delete") and r.resource in ("pods", "services")
        ]
        assert writes == []
    finally:
        await second.stop()


async def test_changing_the_network_mode_of_a_running_job_is_refused(kube: Kube, controller: RunningController) -> None:
    await kube.create(PYTORCHJOBS, pytorchjob("switch"), namespace=kube.ns)
    await eventually(lambda: _n_pods(kube, "switch", 3), what="3 pods")
    await kube.patch(
        PYTORCHJOBS, "switch", {"metadata": {"annotations": {c.ANNOTATION_NETWORK_MODE: "host"}}}, namespace=kube.ns
    )

    async def refused() -> bool:
        return any(e["reason"] == "NetworkModeChangeRefused" for e in await events_for(kube, "switch"))

    await eventually(refused, what="NetworkModeChangeRefused event")
    # Later reconciles (here: woken by label edits) must not repeat the event: that would be a write each.
    assert controller.manager is not None
    metrics = controller.manager.metrics
    labels = {"controller": "pytorchjobs", "result": "success"}
    before = metrics.value("kubedl_reconcile_total", labels) or 0.0
    for value in ("a", "b", "c"):
        await kube.patch(PYTORCHJOBS, "switch", {"metadata": {"labels": {"poke": value}}}, namespace=kube.ns)

    async def reconciled_again() -> bool:
        return (metrics.value("kubedl_reconcile_total", labels) or 0.0) >= before + 3

    await eventually(reconciled_again, what="reconciles after the label edits")
    (event,) = [e for e in await events_for(kube, "switch") if e["reason"] == "NetworkModeChangeRefused"]
    assert event.get("count", 1) == 1
    pods = await pods_of(kube, "switch")
    assert len(pods) == 3 and not any(p["spec"].get("hostNetwork") for p in pods)
    assert all(s["spec"]["clusterIP"] == "None" for s in await services_of(kube, "switch"))


HOSTNET_JOBS = int(os.environ.get("HOSTNET_JOBS", "40"))


@pytest.mark.nodes(10)
async def test_many_host_jobs_never_share_a_port_on_a_node(cluster: Env, kube: Kube) -> None:
    """HOSTNET_JOBS host-network jobs x 8 replicas on 10 nodes with the default port range: no two live pods
    on one node share a port, no job has two pods with the same port. CI runs 40 jobs; ``make soak`` the
    issue's full 1,000 (8,000 pods)."""
    await _many_host_jobs(cluster, kube, HOSTNET_JOBS)


async def _many_host_jobs(cluster: Env, kube: Kube, jobs: int) -> None:
    running = RunningController(cluster, fast_options(namespace=kube.ns, workers=16))
    await running.start()
    try:
        semaphore = asyncio.Semaphore(32)

        async def submit(body: dict[str, Any]) -> None:
            async with semaphore:
                await kube.create(PYTORCHJOBS if body["kind"] == c.PYTORCH_KIND else TFJOBS, body, namespace=kube.ns)

        await asyncio.gather(
            *(
                submit(
                    pytorchjob(f"many-{i}", host=True, replicas={"Master": replica(1), "Worker": replica(7)})
                    if i % 2
                    else tfjob(
                        f"many-{i}",
                        host=True,
                        replicas={"PS": replica(2, name="tensorflow"), "Worker": replica(6, name="tensorflow")},
                    )
                )
                for i in range(jobs)
            )
        )

        async def all_running() -> list[dict[str, Any]] | None:
            listed = await kube.list(PODS, namespace=kube.ns, label_selector=c.LABEL_JOB_NAME)
            running_pods = [p for p in listed.items if (p.get("status") or {}).get("phase") == "Running"]
            return listed.items if len(running_pods) == jobs * 8 else None

        pods = await eventually(all_running, within=max(120, jobs), interval=1.0, what=f"{jobs * 8} running pods")
        per_node = Counter((p["spec"]["nodeName"], host_port(p)) for p in pods)
        assert max(per_node.values()) == 1, "two live pods on one node share a port"
        per_job: dict[str, set[int]] = {}
        for pod in pods:
            per_job.setdefault(pod["metadata"]["labels"][c.LABEL_JOB_NAME], set()).add(host_port(pod))
        assert all(len(ports) == 8 for ports in per_job.values()), "a job has two pods with the same port"
        assert all(LOW <= port <= HIGH for ports in per_job.values() for port in ports)
    finally:
        await running.stop()
