"""EventRecorder against the embedded API server: repeats aggregate into one Event with a count."""

from __future__ import annotations

from kubedl_py.kube.client import CONFIGMAPS, EVENTS, KubeClient
from kubedl_py.kube.events import EventRecorder


async def test_repeated_events_are_one_event_with_a_count(kube: KubeClient, namespace: str) -> None:
    cm = await kube.create(
        CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "j"}}, namespace=namespace
    )
    recorder = EventRecorder(kube, component="kubedl-py")
    for _ in range(3):
        await recorder.warning(cm, "BackOff", "restarting failed replica")
    await recorder.normal(cm, "Created", "created pod j-master-0")
    events = (await kube.list(EVENTS, namespace=namespace)).items
    by_reason = {e["reason"]: e for e in events}
    assert set(by_reason) == {"BackOff", "Created"}
    assert by_reason["BackOff"]["count"] == 3
    assert by_reason["BackOff"]["type"] == "Warning"
    assert by_reason["BackOff"]["involvedObject"]["uid"] == cm["metadata"]["uid"]
    assert by_reason["BackOff"]["source"]["component"] == "kubedl-py"
    assert by_reason["Created"]["count"] == 1
