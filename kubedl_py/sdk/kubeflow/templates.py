"""The jobs ``create_job`` builds from a function or an image, as the Kubeflow training SDK 1.9 builds them.

Why a copy of its rules (``kubeflow.training.utils.utils``): a script that says
``create_job(name=..., train_func=train, num_workers=3)`` must get the same job here: a ``Master`` plus
``num_workers - 1`` Workers for PyTorch, the function's source run by ``torchrun`` or ``python -u`` through
``bash -c``, the pip install prelude, the Istio opt-out annotation, ``gpu`` meaning ``nvidia.com/gpu``. The
jobs are built as dicts in the Training Operator's layout (``runPolicy: {}``); the client puts them in the
layout of the group it talks to.
"""

from __future__ import annotations

import inspect
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kubedl_py.sdk.kubeflow import constants
from kubedl_py.sdk.kubeflow.objects import camel, serialize

__all__ = [
    "command_for_function",
    "container_spec",
    "job_from_function",
    "pip_install_script",
    "pod_template_spec",
    "pytorchjob_template",
    "tfjob_template",
]


def pip_install_script(packages_to_install: Sequence[str], pip_index_url: str) -> str:
    """The shell prelude that installs ``packages_to_install`` before the function runs."""
    packages = " ".join(str(package) for package in packages_to_install)
    return textwrap.dedent(
        f"""
        if ! [ -x "$(command -v pip)" ]; then
            python -m ensurepip || python -m ensurepip --user || apt-get install python-pip
        fi

        PIP_DISABLE_PIP_VERSION_CHECK=1 python -m pip install --quiet \
        --no-warn-script-location --index-url {pip_index_url} {packages}
        """
    )


def command_for_function(
    train_func: Callable[..., Any],
    entrypoint: str,
    train_func_parameters: Mapping[str, Any] | None = None,
    packages_to_install: Sequence[str] | None = None,
    pip_index_url: str = constants.DEFAULT_PIP_INDEX_URL,
) -> tuple[list[str], list[str]]:
    """``(command, args)`` of a container that writes the function's source to a file and runs it."""
    if not callable(train_func):
        raise ValueError(f"Training function must be callable, got function type: {type(train_func)}")
    code = textwrap.dedent(inspect.getsource(train_func))
    name = getattr(train_func, "__name__", "train")
    call = f"{name}()" if train_func_parameters is None else f"{name}({train_func_parameters})"
    code = f"{code}\n{call}\n"
    script = textwrap.dedent(
        """
                program_path=$(mktemp -d)
                read -r -d '' SCRIPT << EOM\n
                {func_code}
                EOM
                printf "%s" \"$SCRIPT\" > \"$program_path/ephemeral_script.py\"
                {entrypoint} \"$program_path/ephemeral_script.py\""""
    ).format(func_code=code, entrypoint=entrypoint)
    if packages_to_install is not None:
        script = pip_install_script(packages_to_install, pip_index_url) + script
    return list(constants.DEFAULT_COMMAND), [script]


def _env(env_vars: Mapping[str, str] | Sequence[Any]) -> list[Any]:
    if isinstance(env_vars, Mapping):
        return [{"name": key, "value": value} for key, value in env_vars.items()]
    # The Kubeflow SDK takes V1EnvVar models or dicts of V1EnvVar's keyword arguments (snake_case).
    return [
        {camel(key): value for key, value in item.items()} if isinstance(item, Mapping) else serialize(item)
        for item in env_vars
    ]


def _resources(resources: Mapping[str, Any] | Any) -> Any:
    if not isinstance(resources, Mapping):
        return serialize(resources)
    amounts = {key.lower(): value for key, value in resources.items()}
    if "gpu" in amounts:
        amounts["nvidia.com/gpu"] = amounts.pop("gpu")
    return {"requests": dict(amounts), "limits": dict(amounts)}


def container_spec(
    name: str,
    base_image: str,
    *,
    command: list[str] | None = None,
    args: list[str] | None = None,
    resources: Any = None,
    volume_mounts: Sequence[Any] | None = None,
    env_vars: Mapping[str, str] | Sequence[Any] | None = None,
) -> dict[str, Any]:
    """The training container: ``resources`` a dict (``cpu``, ``memory``, ``gpu``: requests = limits) or a
    ``V1ResourceRequirements``; ``env_vars`` a dict or a list of ``V1EnvVar``."""
    container: dict[str, Any] = {"name": name, "image": base_image}
    if command is not None:
        container["command"] = command
    if args is not None:
        container["args"] = args
    if volume_mounts:
        container["volumeMounts"] = serialize(list(volume_mounts))
    if env_vars:
        container["env"] = _env(env_vars)
    if resources is not None:
        container["resources"] = _resources(resources)
    return container


def pod_template_spec(containers: list[dict[str, Any]], volumes: Sequence[Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers}
    if volumes:
        spec["volumes"] = serialize(list(volumes))
    return {"metadata": {"annotations": {constants.ISTIO_SIDECAR_INJECTION: "false"}}, "spec": spec}


def _job(
    api_version: str,
    kind: str,
    name: str,
    namespace: str,
    *,
    labels: Mapping[str, str] | None,
    annotations: Mapping[str, str] | None,
) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": name, "namespace": namespace}
    if labels is not None:
        metadata["labels"] = dict(labels)
    if annotations is not None:
        metadata["annotations"] = dict(annotations)
    return {"apiVersion": api_version, "kind": kind, "metadata": metadata, "spec": {"runPolicy": {}}}


def pytorchjob_template(
    api_version: str,
    name: str,
    *,
    namespace: str,
    num_workers: int,
    worker_pod_template_spec: dict[str, Any],
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    num_procs_per_worker: int | str | None = None,
) -> dict[str, Any]:
    """One Master and ``num_workers - 1`` Workers on the same template (the Master gives RANK 0)."""
    job = _job(api_version, constants.PYTORCHJOB_KIND, name, namespace, labels=labels, annotations=annotations)
    spec = job["spec"]
    if num_procs_per_worker is not None:
        spec["nprocPerNode"] = str(num_procs_per_worker)
    specs: dict[str, Any] = {constants.REPLICA_TYPE_MASTER: {"replicas": 1, "template": worker_pod_template_spec}}
    if num_workers > 1:
        specs[constants.REPLICA_TYPE_WORKER] = {"replicas": num_workers - 1, "template": worker_pod_template_spec}
    spec["pytorchReplicaSpecs"] = specs
    return job


def tfjob_template(
    api_version: str,
    name: str,
    *,
    namespace: str,
    pod_template_spec: dict[str, Any],
    num_workers: int,
    labels: Mapping[str, str] | None = None,
    annotations: Mapping[str, str] | None = None,
    num_chief_replicas: int | None = None,
    num_ps_replicas: int | None = None,
) -> dict[str, Any]:
    """Chief, PS and Worker replicas (each only when its number is given) on the same template."""
    job = _job(api_version, constants.TFJOB_KIND, name, namespace, labels=labels, annotations=annotations)
    specs: dict[str, Any] = {}
    if num_chief_replicas is not None:
        specs[constants.REPLICA_TYPE_CHIEF] = {"replicas": num_chief_replicas, "template": pod_template_spec}
    if num_ps_replicas is not None:
        specs[constants.REPLICA_TYPE_PS] = {"replicas": num_ps_replicas, "template": pod_template_spec}
    if num_workers is not None:
        specs[constants.REPLICA_TYPE_WORKER] = {"replicas": num_workers, "template": pod_template_spec}
    job["spec"]["tfReplicaSpecs"] = specs
    return job


def job_from_function(
    *,
    api_version: Callable[[], str],
    name: str | None,
    namespace: str,
    labels: dict[str, str] | None,
    annotations: dict[str, str] | None,
    job_kind: str,
    base_image: str | None,
    train_func: Callable[..., Any] | None,
    parameters: dict[str, Any] | None,
    num_workers: int | None,
    num_procs_per_worker: int | str | None,
    resources_per_worker: Any,
    num_chief_replicas: int | None,
    num_ps_replicas: int | None,
    packages_to_install: list[str] | None,
    pip_index_url: str,
    env_vars: dict[str, str] | list[Any] | None,
    volumes: list[Any] | None,
    volume_mounts: list[Any] | None,
) -> dict[str, Any]:
    """The job ``create_job`` makes from a function or an image, with the Kubeflow SDK's rules and errors;
    ``api_version`` is asked only once the arguments are known to be right."""
    if name is None:
        raise ValueError("Job name must be set to configure Job from function or image")
    if num_workers is None or num_workers < 1:
        raise ValueError(f"At least one Worker for {job_kind} must be set")
    image = base_image if base_image is not None else constants.JOB_PARAMETERS[job_kind]["base_image"]
    command: list[str] | None = None
    args: list[str] | None = None
    if train_func is not None:
        torch = job_kind == constants.PYTORCHJOB_KIND and (num_workers > 1 or num_procs_per_worker is not None)
        command, args = command_for_function(
            train_func,
            constants.ENTRYPOINT_TORCH if torch else constants.ENTRYPOINT_PYTHON,
            parameters,
            packages_to_install,
            pip_index_url,
        )
    container = container_spec(
        constants.JOB_PARAMETERS[job_kind]["container"],
        image,
        command=command,
        args=args,
        resources=resources_per_worker,
        env_vars=env_vars,
        volume_mounts=volume_mounts,
    )
    pod_template = pod_template_spec([container], volumes)
    if job_kind == constants.TFJOB_KIND:
        if num_procs_per_worker is not None:
            raise ValueError(f"num_procs_per_worker can't be set for {constants.TFJOB_KIND}")
        return tfjob_template(
            api_version(),
            name,
            namespace=namespace,
            pod_template_spec=pod_template,
            num_workers=num_workers,
            labels=labels,
            annotations=annotations,
            num_chief_replicas=num_chief_replicas,
            num_ps_replicas=num_ps_replicas,
        )
    if job_kind == constants.PYTORCHJOB_KIND:
        if num_chief_replicas is not None or num_ps_replicas is not None:
            raise ValueError(f"num_chief_replicas and num_ps_replicas can't be set for {constants.PYTORCHJOB_KIND}")
        return pytorchjob_template(
            api_version(),
            name,
            namespace=namespace,
            num_workers=num_workers,
            worker_pod_template_spec=pod_template,
            labels=labels,
            annotations=annotations,
            num_procs_per_worker=num_procs_per_worker,
        )
    raise ValueError(f"Job kind {job_kind} can't be created using function or image. Number of Workers must be set.")
