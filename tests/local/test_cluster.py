"""LocalCluster lifecycle: kubeconfig, persistence across restarts, ``kubedl-py local up``, system objects."""

from __future__ import annotations

import asyncio
import signal
import sys
from pathlib import Path

import aiohttp
import yaml

from kubedl_local import LocalCluster
from tests.local.conftest import Http, eventually, pod

BENCH = Path(__file__).resolve().parents[2] / "bench" / "bench_apiserver.py"


async def test_kubeconfig_and_configuration(cluster: LocalCluster) -> None:
    cfg = yaml.safe_load(cluster.kubeconfig_path.read_text())
    assert cfg["current-context"] == "kubedl-local"
    assert cfg["clusters"][0]["cluster"]["server"] == cluster.url
    assert cluster.configuration.host == cluster.url


async def test_system_objects(cluster: LocalCluster, http: Http) -> None:
    names = [n["metadata"]["name"] for n in (await http.get("/api/v1/namespaces")).body["items"]]
    assert {"default", "kube-system", "kube-public", "kube-node-lease"} <= set(names)
    svc = (await http.get("/api/v1/namespaces/default/services/kubernetes")).body
    assert svc["spec"]["clusterIP"] == "127.1.0.1"
    node = (await http.get("/api/v1/nodes/local-node-0")).body
    assert node["status"]["addresses"][0] == {"type": "InternalIP", "address": cluster.node_ips["local-node-0"]}
    assert {"cpu", "memory", "pods"} <= set(node["status"]["allocatable"])
    assert (await http.get("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/local-node-0")).status == 200

    async def has_sa() -> bool:
        return (await http.get("/api/v1/namespaces/default/serviceaccounts/default")).status == 200

    await eventually(has_sa)


async def test_leases_and_binding(http: Http) -> None:
    leases = "/apis/coordination.k8s.io/v1/namespaces/default/leases"
    lease = {"metadata": {"name": "leader"}, "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15}}
    created = (await http.post(leases, lease)).body
    created["spec"]["holderIdentity"] = "b"
    assert (await http.put(f"{leases}/leader", created)).body["spec"]["holderIdentity"] == "b"
    assert (await http.put(f"{leases}/leader", created)).status == 409  # stale resourceVersion
    await http.post("/api/v1/namespaces/default/pods", pod("manual", schedulerName="my-scheduler"))
    r = await http.post(
        "/api/v1/namespaces/default/pods/manual/binding",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "manual"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "local-node-0"},
        },
    )
    assert r.status == 201
    r = await http.post(
        "/api/v1/namespaces/default/pods/manual/binding", {"target": {"kind": "Node", "name": "local-node-0"}}
    )
    assert r.status == 409


async def test_state_survives_restart(tmp_path: Path) -> None:
    data = tmp_path / "data"
    async with LocalCluster(data_dir=data) as c, aiohttp.ClientSession() as s:
        http = Http(s, c.url)
        await http.post("/api/v1/namespaces", {"metadata": {"name": "keep"}})
        cm = (
            await http.post("/api/v1/namespaces/keep/configmaps", {"metadata": {"name": "c"}, "data": {"a": "1"}})
        ).body
        await http.delete("/api/v1/namespaces/default/services/kubernetes")  # deleted objects stay deleted
        rv = int((await http.get("/api/v1/namespaces/keep/configmaps")).body["metadata"]["resourceVersion"])
    async with LocalCluster(data_dir=data) as c2, aiohttp.ClientSession() as s:
        http = Http(s, c2.url)
        got = (await http.get("/api/v1/namespaces/keep/configmaps/c")).body
        assert got == cm
        new = (await http.post("/api/v1/namespaces/keep/configmaps", {"metadata": {"name": "d"}, "data": {}})).body
        assert int(new["metadata"]["resourceVersion"]) > rv
        r = await http.get(f"/api/v1/namespaces/keep/configmaps?watch=1&resourceVersion={rv}&timeoutSeconds=1")
        assert r.body["type"] == "ADDED" and r.body["object"]["metadata"]["name"] == "d"  # resuming at the restart
        r = await http.get(f"/api/v1/namespaces/keep/configmaps?watch=1&resourceVersion={rv - 1}&timeoutSeconds=1")
        assert r.body["object"]["code"] == 410  # older history does not survive a restart (watch cache)
        assert (await http.get("/api/v1/namespaces/default/services/kubernetes")).status == 200  # re-bootstrapped


async def test_restart_expires_history_of_emptied_resource_types(tmp_path: Path) -> None:
    data = tmp_path / "data"
    secrets = "/api/v1/namespaces/default/secrets"
    async with LocalCluster(data_dir=data) as c, aiohttp.ClientSession() as s:
        http = Http(s, c.url)
        rv = int((await http.get(secrets)).body["metadata"]["resourceVersion"])
        await http.post(secrets, {"metadata": {"name": "s"}, "data": {}})
        assert (await http.delete(f"{secrets}/s")).status == 200
        assert c.store.count(("", "secrets")) == 0
    async with LocalCluster(data_dir=data) as c2, aiohttp.ClientSession() as s:
        http = Http(s, c2.url)
        r = await http.get(f"{secrets}?watch=1&resourceVersion={rv}&timeoutSeconds=1")
        assert r.body is not None and r.body["type"] == "ERROR" and r.body["object"]["code"] == 410


async def test_local_up_cli(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kc" / "config"
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "kubedl_py.cli",
        "local",
        "up",
        "--kubeconfig",
        str(kubeconfig),
        "--nodes",
        "2",
        "--no-controller",
        "--runtime",
        "simulated",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:

        async def ready() -> bool:
            return kubeconfig.exists()

        await eventually(ready, timeout=20, interval=0.05)
        url = yaml.safe_load(kubeconfig.read_text())["clusters"][0]["cluster"]["server"]
        async with aiohttp.ClientSession() as s:
            http = Http(s, url)
            nodes = (await http.get("/api/v1/nodes")).body["items"]
            assert [n["metadata"]["name"] for n in nodes] == ["local-node-0", "local-node-1"]
        proc.send_signal(signal.SIGTERM)
        out, err = await asyncio.wait_for(proc.communicate(), 15)
        assert proc.returncode == 0, err
        assert url in out.decode() + err.decode()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()


async def test_port_in_use_fails_cleanly(cluster: LocalCluster) -> None:
    other = LocalCluster(port=cluster.port)
    try:
        await other.start()
    except OSError:
        pass
    else:
        await other.stop()
        raise AssertionError("expected the port to be taken")


async def test_bench_smoke() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        str(BENCH),
        "--smoke",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode == 0, err.decode()
    assert b"kubernetes_asyncio_creates_per_s" in out
