"""Pods through kubectl: run, wait, logs, describe, debug, delete; what users do with running workloads."""

from __future__ import annotations

from tests.differential.cases.common import EXIT_CODE, IMAGE, RUN_SECONDS, core, make, pod, pod_summary, run_pod
from tests.differential.harness import Tier, case


def _no_events(text: str) -> str:
    """describe's Events section lists what the runtime and scheduler reported, in their own words: the
    section is compared elsewhere (events cases); here, everything above it."""
    return text.split("\nEvents:", maxsplit=1)[0]


@case("kubectl-run-pod", nodes=True)
async def _(t: Tier) -> None:
    """run a pod, wait for Ready, read it back."""
    await t.kubectl("run", "web", f"--image={IMAGE}", "--restart=Never", "--labels=app=web,tier=front", "--port=8080")
    await t.kubectl("wait", "--for=condition=Ready", "pod/web", "--timeout=60s")
    await t.kubectl("get", "pod", "web", "-o", "yaml", out=_pod_without_status)
    await t.kubectl("get", "pods", "-o", "wide")
    await t.kubectl("get", "pod", "web", "-o", "jsonpath={.status.phase} {.status.qosClass} {.spec.nodeName}")


def _pod_without_status(text: str) -> object:
    import yaml

    doc = yaml.safe_load(text)
    doc.pop("status", None)
    return doc


@case("kubectl-run-env-command", nodes=True)
async def _(t: Tier) -> None:
    """run with --env, --command and arguments: they land in the container."""
    await t.kubectl(
        "run",
        "cmd",
        f"--image={IMAGE}",
        "--restart=Never",
        "--env=A=1",
        "--env=B=two",
        "--command",
        "--",
        "sh",
        "-c",
        "echo hi",
    )
    await t.kubectl("get", "pod", "cmd", "-o", "jsonpath={.spec.containers[0]}", out=_json_text)


def _json_text(text: str) -> object:
    import json

    return json.loads(text)


@case("kubectl-run-dry-run")
async def _(t: Tier) -> None:
    """run --dry-run=client prints without asking; --dry-run=server shows the defaulted pod, stores nothing."""
    await t.kubectl("run", "dry", f"--image={IMAGE}", "--dry-run=client", "-o", "yaml")
    await t.kubectl("run", "dry", f"--image={IMAGE}", "--dry-run=server", "-o", "yaml")
    await t.kubectl("get", "pod", "dry")


@case("kubectl-run-invalid")
async def _(t: Tier) -> None:
    """run with an invalid name, and with resources the server refuses."""
    await t.kubectl("run", "Bad_Name", f"--image={IMAGE}")
    await t.kubectl(
        "run",
        "neg",
        f"--image={IMAGE}",
        "--overrides",
        '{"spec":{"containers":[{"name":"neg","image":"busybox:1.36","resources":{"requests":{"cpu":"-1"}}}]}}',
    )


@case("kubectl-run-image-pull-policy")
async def _(t: Tier) -> None:
    """imagePullPolicy defaults by tag: latest and no tag -> Always, a tag -> IfNotPresent."""
    for name, image in (
        ("latest", "busybox:latest"),
        ("notag", "busybox"),
        ("tagged", IMAGE),
        ("digest", "busybox@sha256:" + "a" * 64),
    ):
        await t.kubectl(
            "run", name, f"--image={image}", "--dry-run=server", "-o", "jsonpath={.spec.containers[0].imagePullPolicy}"
        )


@case("kubectl-wait-succeeded", nodes=True)
async def _(t: Tier) -> None:
    """A pod that exits 0: wait for phase Succeeded with a jsonpath condition; the pod table says Completed."""
    await t.kubectl(
        "run",
        "done",
        f"--image={IMAGE}",
        "--restart=Never",
        f"--annotations={EXIT_CODE}=0",
        f"--annotations={RUN_SECONDS}=0",
    )
    await t.kubectl("wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/done", "--timeout=60s")
    await t.kubectl("get", "pod", "done")
    await t.kubectl("get", "pod", "done", "-o", "jsonpath={.status.containerStatuses[0].state.terminated.reason}")


@case("kubectl-wait-failed", nodes=True)
async def _(t: Tier) -> None:
    """A pod that exits 3: phase Failed, reason Error, exit code 3."""
    await t.kubectl("run", "fails", f"--image={IMAGE}", "--restart=Never", f"--annotations={EXIT_CODE}=3")
    await t.kubectl("wait", "--for=jsonpath={.status.phase}=Failed", "pod/fails", "--timeout=60s")
    await t.kubectl("get", "pod", "fails")
    await t.kubectl(
        "get",
        "pod",
        "fails",
        "-o",
        "jsonpath={.status.containerStatuses[0].state.terminated.reason}/{.status.containerStatuses[0].state.terminated.exitCode}",
    )


@case("kubectl-wait-timeout", nodes=True)
async def _(t: Tier) -> None:
    """wait for a condition that never comes: exit 1 with the timeout message."""
    await t.kubectl("run", "forever", f"--image={IMAGE}", "--restart=Never")
    await t.kubectl("wait", "--for=condition=Ready", "pod/forever", "--timeout=60s")
    await t.kubectl("wait", "--for=jsonpath={.status.phase}=Succeeded", "pod/forever", "--timeout=1s")
    await t.kubectl("wait", "--for=condition=Ready", "pod/missing", "--timeout=1s")


@case("kubectl-wait-delete", nodes=True)
async def _(t: Tier) -> None:
    """delete --wait=false then wait --for=delete: the pod goes once the node confirms."""
    # Its containers take 3 s to stop (on both planes: the same node agent), so the pod is still there when
    # wait starts; a quicker stop made the case race kubectl's start-up.
    stop = "--annotations=local.kubedl.io/termination-seconds=3"
    await t.kubectl("run", "brief", f"--image={IMAGE}", "--restart=Never", stop)
    await t.kubectl("wait", "--for=condition=Ready", "pod/brief", "--timeout=60s")
    await t.kubectl("delete", "pod", "brief", "--wait=false")
    await t.kubectl("wait", "--for=delete", "pod/brief", "--timeout=60s")
    await t.kubectl("get", "pod", "brief")


@case("kubectl-wait-selector", nodes=True)
async def _(t: Tier) -> None:
    """wait on every pod matching a label selector."""
    for name in ("a", "b"):
        await t.kubectl("run", name, f"--image={IMAGE}", "--restart=Never", "--labels=group=g")
    await t.kubectl("wait", "--for=condition=Ready", "pods", "-l", "group=g", "--timeout=60s")


def _log_pod(t: Tier, name: str, containers: int = 1) -> dict[str, object]:
    body = pod(
        name,
        annotations={EXIT_CODE: "0", RUN_SECONDS: "0"},
        containers=[{"name": f"c{i}", "image": IMAGE} for i in range(containers)],
        restartPolicy="Never",
    )
    return body


@case("kubectl-logs", nodes=True)
async def _(t: Tier) -> None:
    """logs of a finished container, with --tail, --limit-bytes, --timestamps."""
    await run_pod(t, _log_pod(t, "talker"), phases=("Succeeded",))
    await t.kubectl("logs", "talker")
    await t.kubectl("logs", "talker", "--tail=1")
    await t.kubectl("logs", "talker", "--tail=0")
    await t.kubectl("logs", "talker", "--limit-bytes=10")
    await t.kubectl("logs", "talker", "--timestamps", out=lambda s: [line.split(" ", 1)[1] for line in s.splitlines()])


@case("kubectl-logs-since", nodes=True)
async def _(t: Tier) -> None:
    """logs --since and --since-time: recent lines kept, a time in the future keeps none."""
    await run_pod(t, _log_pod(t, "talker"), phases=("Succeeded",))
    await t.kubectl("logs", "talker", "--since=1h")
    await t.kubectl("logs", "talker", "--since-time=2000-01-01T00:00:00Z")
    await t.kubectl("logs", "talker", "--since-time=2999-01-01T00:00:00Z")
    await t.kubectl("logs", "talker", "--since=1h", "--since-time=2000-01-01T00:00:00Z")


@case("kubectl-logs-errors", nodes=True)
async def _(t: Tier) -> None:
    """logs of a missing pod, of a wrong container, of a multi-container pod without -c, --previous."""
    await run_pod(t, _log_pod(t, "duo", containers=2), phases=("Succeeded",))
    await t.kubectl("logs", "nope")
    await t.kubectl("logs", "duo")
    await t.kubectl("logs", "duo", "-c", "c1")
    await t.kubectl("logs", "duo", "-c", "c9")
    await t.kubectl("logs", "duo", "-c", "c0", "--previous")
    # kubectl reads the containers' logs from a map: in random order
    await t.kubectl("logs", "duo", "--all-containers", "--prefix", out=lambda s: sorted(s.splitlines()))


@case("kubectl-logs-invalid-options", nodes=True)
async def _(t: Tier) -> None:
    """Log options the server validates (raw HTTP: kubectl checks some itself)."""
    await run_pod(t, _log_pod(t, "talker"), phases=("Succeeded",))
    for query in (
        "tailLines=-1",
        "limitBytes=0",
        "sinceSeconds=0",
        "sinceSeconds=5&sinceTime=2000-01-01T00:00:00Z",
        "tailLines=x",
        "container=zzz",
    ):
        await t.get(core(t, "pods", "talker", "log", query=query))


@case("kubectl-logs-pending")
async def _(t: Tier) -> None:
    """logs of a pod no node runs (an unschedulable selector): the answer before any container started."""
    await make(t, core(t, "pods"), pod("waiting", nodeSelector={"no-such": "node"}))
    await t.kubectl("logs", "waiting")
    await t.get(core(t, "pods", "waiting", "log"))


@case("kubectl-describe-pod", nodes=True)
async def _(t: Tier) -> None:
    """describe of a running pod (the Events section aside)."""
    await t.kubectl("run", "desc", f"--image={IMAGE}", "--restart=Never", "--labels=app=desc")
    await t.kubectl("wait", "--for=condition=Ready", "pod/desc", "--timeout=60s")
    await t.kubectl("describe", "pod", "desc", out=_no_events)


@case("kubectl-pod-unschedulable")
async def _(t: Tier) -> None:
    """A pod no node fits: Pending, PodScheduled=False/Unschedulable, a FailedScheduling event."""
    await make(t, core(t, "pods"), pod("stuck", nodeSelector={"no-such": "node"}))
    await t.poll(
        core(t, "pods", "stuck"),
        lambda r: any(c.get("type") == "PodScheduled" for c in (r.body.get("status") or {}).get("conditions") or []),
        keep=lambda b: [(c["type"], c["status"], c.get("reason")) for c in b["status"]["conditions"]],
    )
    await t.kubectl("get", "pod", "stuck")
    await t.poll(
        core(t, "events", query="fieldSelector=involvedObject.name=stuck"),
        lambda r: bool(r.body["items"]),
        keep=lambda b: [(e["type"], e["reason"], e["involvedObject"]["kind"]) for e in b["items"]][:1],
    )


@case("kubectl-debug-missing")
async def _(t: Tier) -> None:
    """debug of a missing pod: the NotFound kubectl reads from the 404's details."""
    await t.kubectl("debug", "nope", f"--image={IMAGE}")


@case("kubectl-debug-ephemeral", nodes=True)
async def _(t: Tier) -> None:
    """debug adds an ephemeral container through pods/ephemeralcontainers; removing it is refused."""
    await t.kubectl("run", "target", f"--image={IMAGE}", "--restart=Never")
    await t.kubectl("wait", "--for=condition=Ready", "pod/target", "--timeout=60s")
    await t.kubectl("debug", "target", f"--image={IMAGE}", "--container=dbg")
    await t.get(core(t, "pods", "target"), keep=lambda b: b["spec"]["ephemeralContainers"])
    await t.patch(
        core(t, "pods", "target", "ephemeralcontainers"),
        [{"op": "remove", "path": "/spec/ephemeralContainers/0"}],
        "json",
    )


@case("kubectl-delete-pod-force", nodes=True)
async def _(t: Tier) -> None:
    """delete --force --grace-period=0: the warning, and the pod gone at once."""
    await t.kubectl("run", "victim", f"--image={IMAGE}", "--restart=Never")
    await t.kubectl("wait", "--for=condition=Ready", "pod/victim", "--timeout=60s")
    await t.kubectl("delete", "pod", "victim", "--force", "--grace-period=0")
    await t.kubectl("get", "pod", "victim")


@case("kubectl-delete-pod-graceful", nodes=True)
async def _(t: Tier) -> None:
    """A graceful delete: the pod lingers with a deletionTimestamp until the node confirms."""
    await run_pod(t, pod("slow", annotations={"local.kubedl.io/termination-seconds": "1"}))
    reply = await t.delete(
        core(t, "pods", "slow"),
        keep=lambda b: {
            "deletionGracePeriodSeconds": b["metadata"].get("deletionGracePeriodSeconds"),
            "deleting": "deletionTimestamp" in b["metadata"],
            "phase": b["status"].get("phase"),
        },
    )
    assert reply.status == 200
    await t.poll(core(t, "pods", "slow"), lambda r: r.status == 404, keep=False)


@case("kubectl-run-restart-policy-onfailure", nodes=True)
async def _(t: Tier) -> None:
    """restartPolicy OnFailure and a failing container: restarted in place, restartCount grows."""
    await t.kubectl(
        "run",
        "flaky",
        f"--image={IMAGE}",
        "--restart=OnFailure",
        f"--annotations={EXIT_CODE}=1",
        f"--annotations={RUN_SECONDS}=0",
    )
    await t.poll(
        core(t, "pods", "flaky"),
        lambda r: (r.body.get("status", {}).get("containerStatuses") or [{}])[0].get("restartCount", 0) >= 2,
        keep=lambda b: {
            "phase": b["status"]["phase"],
            "restarted": b["status"]["containerStatuses"][0]["restartCount"] >= 2,
        },
    )


@case("kubectl-get-pods-phases", nodes=True)
async def _(t: Tier) -> None:
    """The pod table's STATUS for running, completed, failed and pending pods."""
    await run_pod(t, pod("run"))
    await run_pod(t, pod("ok", annotations={EXIT_CODE: "0"}, restartPolicy="Never"), phases=("Succeeded",))
    await run_pod(t, pod("bad", annotations={EXIT_CODE: "2"}, restartPolicy="Never"), phases=("Failed",))
    await make(t, core(t, "pods"), pod("pending", nodeSelector={"no-such": "node"}))
    await t.kubectl("get", "pods", "--sort-by=.metadata.name")
    await t.kubectl("get", "pods", "--field-selector=status.phase=Running", "-o", "name")
    await t.kubectl("get", "pods", "--field-selector=status.phase!=Running,status.phase!=Pending", "-o", "name")


@case("kubectl-top-pods")
async def _(t: Tier) -> None:
    """top: no metrics API on either server."""
    await t.kubectl("top", "pods")


@case("pod-status-from-node", nodes=True)
async def _(t: Tier) -> None:
    """What the node reports for a running pod, as the controller reads it."""
    await run_pod(t, pod("observed", labels={"app": "o"}))
    await t.get(core(t, "pods", "observed"), keep=pod_summary)
