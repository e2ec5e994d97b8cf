"""Jobs without YAML: :func:`pytorch_job` and :func:`tf_job` build validated models from a few arguments.

Why: most jobs are "this image, this command, N workers"; writing the nested replica specs by hand is where
typos happen. The result goes through the same validation as a YAML file, so a bad argument raises
:class:`JobValidationError` naming the field, before anything is sent.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any

from kubedl_py.api import constants as c
from kubedl_py.api.jobs import PyTorchJob, TFJob
from kubedl_py.api.validation import FieldError, JobValidationError, parse_job


def _resources(resources: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """``{"cpu": 2, "nvidia.com/gpu": 1}`` means requests = limits; ``{"requests": .., "limits": ..}`` as is."""
    if not resources:
        return None
    if set(resources) <= {"requests", "limits"}:
        return {k: {name: str(v) for name, v in dict(q).items()} for k, q in resources.items()}
    quantities = {name: str(value) for name, value in resources.items()}
    return {"requests": dict(quantities), "limits": dict(quantities)}


def _container(
    name: str,
    image: str,
    command: str | Sequence[str],
    *,
    args: Sequence[str] | None,
    env: Mapping[str, str] | None,
    resources: Mapping[str, Any] | None,
    subject: str,
) -> dict[str, Any]:
    container: dict[str, Any] = {"name": name, "image": image, "command": _command(command, subject)}
    if args:
        container["args"] = list(args)
    if env:
        container["env"] = [{"name": k, "value": str(v)} for k, v in env.items()]
    limits = _resources(resources)
    if limits:
        container["resources"] = limits
    return container


def _command(command: str | Sequence[str], subject: str) -> list[str]:
    """The container's argv. A string is one program name (``"train"``); a string with spaces is refused, not
    split: Kubernetes would run a program literally named ``"python train.py"`` (the pod fails with "no such
    file"), and guessing how to split it (shell quoting, globs, ``&&``) would be wrong as often as right."""
    if not isinstance(command, str):
        return list(command)
    if command.split() == [command]:
        return [command]
    try:
        suggestion = shlex.split(command)
    except ValueError:
        suggestion = command.split()
    raise JobValidationError(
        [
            FieldError(
                "command",
                f"{command!r} is one string with spaces; it is refused, not split (Kubernetes would run a program "
                f"of that whole name): give the arguments as a list, e.g. command={suggestion!r}",
            )
        ],
        subject=subject,
    )


def _replica(
    replicas: int, container: dict[str, Any], restart_policy: str | None, pod_annotations: Mapping[str, str] | None
) -> dict[str, Any]:
    template: dict[str, Any] = {"spec": {"containers": [dict(container)]}}
    if pod_annotations:
        template["metadata"] = {"annotations": dict(pod_annotations)}
    spec: dict[str, Any] = {"replicas": replicas, "template": template}
    if restart_policy:
        spec["restartPolicy"] = restart_policy
    return spec


def _metadata(
    name: str,
    namespace: str | None,
    labels: Mapping[str, str] | None,
    annotations: Mapping[str, str] | None,
    host_network: bool,
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if labels:
        meta["labels"] = dict(labels)
    notes = dict(annotations or {})
    if host_network:
        notes[c.ANNOTATION_NETWORK_MODE] = c.NETWORK_MODE_HOST
    if notes:
        meta["annotations"] = notes
    return meta


def _run_policy(
    backoff_limit: int | None, active_deadline_seconds: int | None, clean_pod_policy: str | None
) -> dict[str, Any]:
    policy: dict[str, Any] = {}
    if backoff_limit is not None:
        policy["backoffLimit"] = backoff_limit
    if active_deadline_seconds is not None:
        policy["activeDeadlineSeconds"] = active_deadline_seconds
    if clean_pod_policy is not None:
        policy["cleanPodPolicy"] = clean_pod_policy
    return policy


def pytorch_job(
    name: str,
    image: str,
    command: str | Sequence[str],
    *,
    workers: int = 0,
    nproc_per_node: int | str | None = None,
    resources: Mapping[str, Any] | None = None,
    host_network: bool = False,
    args: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    namespace: str | None = None,
    restart_policy: str | None = None,
    backoff_limit: int | None = None,
    active_deadline_seconds: int | None = None,
    clean_pod_policy: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    pod_annotations: Mapping[str, str] | None = None,
) -> PyTorchJob:
    """A PyTorchJob of one Master and ``workers`` Workers running ``command`` in ``image``.

    ``resources`` applies to every replica (``{"cpu": 4, "memory": "16Gi", "nvidia.com/gpu": 1}`` sets
    requests = limits); ``host_network=True`` adds ``kubedl.io/network-mode: host``. The result is
    validated: a bad argument raises :class:`JobValidationError` naming the field.
    """
    container = _container(
        c.PYTORCH_CONTAINER, image, command, args=args, env=env, resources=resources, subject=f"PyTorchJob {name!r}"
    )
    specs = {"Master": _replica(1, container, restart_policy, pod_annotations)}
    if workers:
        specs["Worker"] = _replica(workers, container, restart_policy, pod_annotations)
    spec: dict[str, Any] = {"pytorchReplicaSpecs": specs}
    if nproc_per_node is not None:
        spec["nprocPerNode"] = nproc_per_node
    spec.update(_run_policy(backoff_limit, active_deadline_seconds, clean_pod_policy))
    body = {
        "apiVersion": c.API_VERSION,
        "kind": c.PYTORCH_KIND,
        "metadata": _metadata(name, namespace, labels, annotations, host_network),
        "spec": spec,
    }
    job = parse_job(body, source=f"PyTorchJob {name!r}")
    assert isinstance(job, PyTorchJob)
    return job


def tf_job(
    name: str,
    image: str,
    command: str | Sequence[str],
    *,
    workers: int = 1,
    ps: int = 0,
    chief: bool = False,
    evaluator: bool = False,
    resources: Mapping[str, Any] | None = None,
    host_network: bool = False,
    args: Sequence[str] | None = None,
    env: Mapping[str, str] | None = None,
    namespace: str | None = None,
    restart_policy: str | None = None,
    success_policy: str | None = None,
    backoff_limit: int | None = None,
    active_deadline_seconds: int | None = None,
    clean_pod_policy: str | None = None,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    pod_annotations: Mapping[str, str] | None = None,
) -> TFJob:
    """A TFJob of ``workers`` Workers, ``ps`` parameter servers, and optionally a Chief and an Evaluator.

    Same conventions as :func:`pytorch_job`; the container is named ``tensorflow``.
    """
    container = _container(
        c.TF_CONTAINER, image, command, args=args, env=env, resources=resources, subject=f"TFJob {name!r}"
    )
    specs: dict[str, Any] = {}
    if chief:
        specs["Chief"] = _replica(1, container, restart_policy, pod_annotations)
    if ps:
        specs["PS"] = _replica(ps, container, restart_policy, pod_annotations)
    if workers:
        specs["Worker"] = _replica(workers, container, restart_policy, pod_annotations)
    if evaluator:
        specs["Evaluator"] = _replica(1, container, restart_policy, pod_annotations)
    spec: dict[str, Any] = {"tfReplicaSpecs": specs}
    if success_policy is not None:
        spec["successPolicy"] = success_policy
    spec.update(_run_policy(backoff_limit, active_deadline_seconds, clean_pod_policy))
    body = {
        "apiVersion": c.API_VERSION,
        "kind": c.TF_KIND,
        "metadata": _metadata(name, namespace, labels, annotations, host_network),
        "spec": spec,
    }
    job = parse_job(body, source=f"TFJob {name!r}")
    assert isinstance(job, TFJob)
    return job
