"""A typo in a pod template (``imagee: x``) is caught, on both control planes, whoever created the job.

Where it is caught (docs/api.md, "Pod templates"): the controller creates pods with
``fieldValidation=Strict``, so the API server's own pod schema judges the template, and a field it does not
know fails the job ``InvalidSpec`` naming the replica type and the field at its path in the job. The job's
CRD keeps the template as the user wrote it (a pod schema there would pin one Kubernetes version's fields),
so ``kubectl apply`` accepts the job; the controller's first pod of the replica type is where it stops,
before any other pod of that type is made. ``kubedl-py submit`` (and the SDK) refuse the field names a pod
template does not have before sending anything.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.integration.conftest import (
    PYTORCHJOBS,
    Env,
    Kube,
    RunningController,
    condition,
    events_for,
    eventually,
    pods_of,
    pytorchjob,
    replica,
    wait_condition,
)
from tests.sdk.test_cli import kubedl, one_line

TYPO = "spec.pytorchReplicaSpecs.Worker.template.spec.containers[0].imagee"


def with_typos(name: str) -> dict[str, object]:
    job = pytorchjob(name, replicas={"Master": replica(1), "Worker": replica(2)})
    worker = job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]
    worker["spec"]["containers"][0]["imagee"] = "busybox:1.36"
    worker["metadata"] = {"labelz": {"team": "a"}}
    return job


async def test_a_template_typo_fails_the_job_naming_the_replica_and_the_field(
    kube: Kube, controller: RunningController
) -> None:
    await kube.create(PYTORCHJOBS, with_typos("typos"), namespace=kube.ns)  # what kubectl apply sends
    failed = await wait_condition(kube, PYTORCHJOBS, "typos", "Failed")
    cond = condition(failed, "Failed")
    assert cond is not None and cond["reason"] == "InvalidSpec", cond
    message = cond["message"]
    assert "the Worker pod template has unknown fields" in message, message
    assert TYPO in message and "spec.pytorchReplicaSpecs.Worker.template.metadata.labelz" in message, message

    async def warned() -> list[dict[str, object]]:
        return [e for e in await events_for(kube, "typos") if e["reason"] == "InvalidSpec"]

    (event, *_) = await eventually(warned, what="the InvalidSpec event")
    assert TYPO in str(event["message"])
    assert [p for p in await pods_of(kube, "typos") if "-worker-" in p["metadata"]["name"]] == []


async def test_submit_refuses_a_template_typo_before_sending(
    cluster: Env, kube: Kube, controller: RunningController, tmp_path: Path
) -> None:
    """``kubedl-py submit`` knows the pod template's field names (kubedl_py/api/podfields.py): it refuses the
    typos, naming each with the closest real field, and sends nothing (the controller's own catch is above)."""
    path = tmp_path / "typo.yaml"
    path.write_text(yaml.safe_dump(with_typos("cli-typo")))
    run = await kubedl(cluster, "submit", str(path), "--wait", "--timeout", "60")
    assert run.code == 2, (run.out, run.err)
    line = one_line(run.err)
    assert f"{TYPO}: is not a field of a Container" in line and "(did you mean image?)" in line, line
    assert "spec.pytorchReplicaSpecs.Worker.template.metadata.labelz" in line, line
    assert (await kube.list(PYTORCHJOBS, namespace=kube.ns)).items == []
