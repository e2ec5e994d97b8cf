"""Leader election on a real Lease of the embedded API server: one leader; a successor after a stop."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from kubedl_py.kube.client import LEASES, KubeClient
from kubedl_py.kube.errors import NotLeader
from kubedl_py.kube.leader import LeaderElectionSettings, LeaderElector, LeadershipLost
from kubedl_py.kube.resources import CONFIGMAPS
from tests.kube.support import eventually


def settings(identity: str, namespace: str) -> LeaderElectionSettings:
    return LeaderElectionSettings(
        name="kubedl-py",
        namespace=namespace,
        identity=identity,
        lease_duration=1.0,
        renew_deadline=0.6,
        retry_period=0.1,
    )


async def cancel(task: asyncio.Task[Any]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, LeadershipLost):
        await task


async def test_two_electors_one_leader_and_takeover(cluster: Any, kube: KubeClient, namespace: str) -> None:
    async with KubeClient(configuration=cluster.configuration) as other_kube:
        a = LeaderElector(kube, settings("a", namespace))
        b = LeaderElector(other_kube, settings("b", namespace))
        both: list[bool] = []

        async def watchdog() -> None:
            while True:
                both.append(a.is_leader and b.is_leader)
                await asyncio.sleep(0.01)

        tasks = {a: asyncio.create_task(a.run()), b: asyncio.create_task(b.run())}
        dog = asyncio.create_task(watchdog())
        await eventually(lambda: a.is_leader or b.is_leader, what="a leader")
        leader, follower = (a, b) if a.is_leader else (b, a)
        lease = await kube.get(LEASES, "kubedl-py", namespace=namespace)
        assert lease["spec"]["holderIdentity"] == leader.identity
        first_renew = lease["spec"]["renewTime"]

        async def renewed() -> bool:
            current = await kube.get(LEASES, "kubedl-py", namespace=namespace)
            return bool(current["spec"]["renewTime"] != first_renew)

        for _ in range(60):
            if await renewed():
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the leader never renewed its lease")
        assert not follower.is_leader

        # The leader stops without releasing (a crash): the follower takes over within the lease duration.
        loop = asyncio.get_running_loop()
        stopped_at = loop.time()
        await cancel(tasks[leader])
        await eventually(lambda: follower.is_leader, within=5, what="takeover")
        assert loop.time() - stopped_at <= settings("x", namespace).lease_duration + 0.5
        lease = await kube.get(LEASES, "kubedl-py", namespace=namespace)
        assert lease["spec"]["holderIdentity"] == follower.identity
        assert lease["spec"]["leaseTransitions"] == 1

        # A graceful stop releases the lease at once.
        await cancel(tasks[follower])
        await follower.release()
        lease = await kube.get(LEASES, "kubedl-py", namespace=namespace)
        assert not lease["spec"].get("holderIdentity")
        await cancel(dog)
        assert not any(both)


async def test_release_succeeds_when_a_renewal_reached_the_server_but_not_us(
    cluster: Any, kube: KubeClient, namespace: str
) -> None:
    """A renewal cancelled by the stop may land on the server after the elector's last read: the release
    then meets a newer resourceVersion (Conflict) and must re-read and still give the Lease up."""
    elector = LeaderElector(kube, settings("solo", namespace))
    task = asyncio.create_task(elector.run())
    await eventually(lambda: elector.is_leader, what="leadership")
    await cancel(task)
    # The write the elector never saw the reply of: same holder, a newer version on the server.
    lease = await kube.get(LEASES, "kubedl-py", namespace=namespace)
    lease["spec"]["leaseDurationSeconds"] = 2
    await kube.replace(LEASES, lease, namespace=namespace)
    await elector.release()
    released = await kube.get(LEASES, "kubedl-py", namespace=namespace)
    assert not released["spec"].get("holderIdentity"), released["spec"]
    assert not elector.is_leader


async def test_a_leader_past_its_renew_deadline_sends_no_write(cluster: Any, kube: KubeClient, namespace: str) -> None:
    """The client calls the elector's fence just before each write leaves: once the last renewal is older than
    the renew deadline by the elector's clock (a process paused past its lease, resumed with writes in flight),
    no write reaches the server, while reads go on and the Lease's own renewal is sent."""
    now = [1000.0]
    elector = LeaderElector(kube, settings("a", namespace), clock=lambda: now[0])
    kube.write_fence = elector.fence
    task = asyncio.create_task(elector.run())
    try:
        await eventually(lambda: elector.is_leader, what="a leads")
        config = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "written"}, "data": {"a": "1"}}
        await kube.create(CONFIGMAPS, config, namespace=namespace)  # leading, renewed: sent
        now[0] += 60  # paused for a minute: the renewal loop has not run yet
        late = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "late"}, "data": {"a": "1"}}
        # (over the renew deadline, or stepped down already if the renewal loop ran first: either way refused)
        with pytest.raises(NotLeader):
            await kube.create(CONFIGMAPS, late, namespace=namespace)
        with pytest.raises(NotLeader):
            await kube.patch(CONFIGMAPS, "written", {"data": {"a": "2"}}, namespace=namespace)
        names = [item["metadata"]["name"] for item in (await kube.list(CONFIGMAPS, namespace=namespace)).items]
        assert names == ["written"]  # reads are not fenced; the refused create never reached the server
        assert (await kube.get(CONFIGMAPS, "written", namespace=namespace))["data"] == {"a": "1"}
    finally:
        await cancel(task)
