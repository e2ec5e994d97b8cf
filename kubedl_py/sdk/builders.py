"""Jobs without YAML: :func:`training_job` builds a validated model of any registered kind from a few arguments.

Why: most jobs are "this image, this command, N workers"; writing the nested replica specs by hand is where
typos happen. The result goes through the same validation as a YAML file, so a bad argument raises
:class:`JobValidationError` naming the field, before anything is sent. What differs per kind (the spec field
of its replica specs, its container's name) is read from the kind's ``Framework``, so a kind a plug-in adds
has a builder too; ``shortcuts.py`` keeps ``pytorch_job`` and ``tf_job`` as calls of this one.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from typing import Any, TypedDict, Unpack

from kubedl_py.api import constants as c
from kubedl_py.api.jobs import JOB_MODELS, Job
from kubedl_py.api.validation import FieldError, JobValidationError, parse_job
from kubedl_py.sdk.kinds import canonical_kind


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


class JobOptions(TypedDict, total=False):
    """The keyword arguments every builder takes besides its own, each optional."""

    #: every replica's: ``{"cpu": 4, "memory": "16Gi", "nvidia.com/gpu": 1}`` sets requests = limits;
    #: ``{"requests": {...}, "limits": {...}}`` is taken as it is
    resources: Mapping[str, Any] | None
    #: ``kubedl.io/network-mode: host`` on the job
    host_network: bool
    args: Sequence[str] | None
    env: Mapping[str, str] | None
    namespace: str | None
    restart_policy: str | None
    backoff_limit: int | None
    active_deadline_seconds: int | None
    clean_pod_policy: str | None
    labels: Mapping[str, str] | None
    annotations: Mapping[str, str] | None
    #: on every replica's pod template
    pod_annotations: Mapping[str, str] | None


def training_job(
    kind: str,
    name: str,
    image: str,
    command: str | Sequence[str],
    *,
    replicas: Mapping[str, int],
    spec: Mapping[str, Any] | None = None,
    **options: Unpack[JobOptions],
) -> Job:
    """A job of ``kind`` (its kind, plural, short name or framework: ``"xgboost"``) whose replicas, ``replicas``
    of each type (``{"Master": 1, "Worker": 4}``), run ``command`` in ``image`` in the kind's container.

    ``spec`` adds the kind's own fields as written in YAML (``{"nprocPerNode": 4}``, ``{"slotsPerWorker": 2}``);
    ``options`` are :class:`JobOptions`. The result is validated: a bad argument raises
    :class:`JobValidationError` naming the field.
    """
    unknown = sorted(set(options) - set(JobOptions.__annotations__))
    if unknown:  # what Python says of a misspelt keyword argument, as a type checker would have
        raise TypeError(f"training_job() got an unexpected keyword argument {unknown[0]!r}")
    try:
        found = canonical_kind(kind)
    except ValueError as exc:
        raise JobValidationError([FieldError("kind", str(exc))], subject=f"job {name!r}") from None
    assert found is not None
    framework = JOB_MODELS[found].FRAMEWORK
    subject = f"{framework.kind} {name!r}"
    container = _container(
        framework.container_name,
        image,
        command,
        args=options.get("args"),
        env=options.get("env"),
        resources=options.get("resources"),
        subject=subject,
    )
    restart_policy, pod_annotations = options.get("restart_policy"), options.get("pod_annotations")
    specs = {
        replica_type: _replica(count, container, restart_policy, pod_annotations)
        for replica_type, count in replicas.items()
    }
    body_spec: dict[str, Any] = {framework.replica_specs_field: specs, **(spec or {})}
    policy = _run_policy(
        options.get("backoff_limit"), options.get("active_deadline_seconds"), options.get("clean_pod_policy")
    )
    body_spec.update(policy)
    metadata = _metadata(
        name,
        options.get("namespace"),
        options.get("labels"),
        options.get("annotations"),
        options.get("host_network", False),
    )
    body = {"apiVersion": c.API_VERSION, "kind": framework.kind, "metadata": metadata, "spec": body_spec}
    return parse_job(body, source=subject, pod_fields=True)
