"""Validation of jobs, with errors that name the field and say the fix.

Three layers reject bad jobs, from the cheapest to the last resort:

1. the generated CRD schema (types, enums, ranges) — enforced by the API server for ``kubectl apply``;
2. this module — run by the SDK before anything is sent, and by the controller on every reconcile;
3. the controller turns whatever still gets through (a job created by a client that skipped 2) into a
   ``Failed`` condition with reason ``InvalidSpec`` instead of half-creating pods.

``parse_job`` turns raw input (a dict from YAML/JSON) into a model and raises ``JobValidationError`` with
every problem found, never a bare pydantic traceback.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from collections.abc import Set as AbstractSet
from typing import Any

import pydantic

from kubedl_py.api import constants as c
from kubedl_py.api import podfields
from kubedl_py.api.common import RdmaSpec
from kubedl_py.api.defaults import DEFAULT_REPLICAS
from kubedl_py.api.errors import FieldError, JobValidationError
from kubedl_py.api.groups import KUBEFLOW, ApiGroup, group_of, to_internal, wire_path
from kubedl_py.api.kinds import all_kinds, kind_api
from kubedl_py.api.kinds.base import Framework, KindAPI, TrainingJob
from kubedl_py.api.quantities import quantity_value

Job = TrainingJob

__all__ = [
    "KUBEDL_ONLY_REPLICA_FIELDS",
    "KUBEDL_ONLY_SPEC_FIELDS",
    "FieldError",
    "JobValidationError",
    "host_port_count",
    "host_port_errors",
    "parse_job",
    "parse_rdma",
    "validate_job",
]

_NOT_SUPPORTED = "is a KubeDL feature kubedl-py does not support"
#: KubeDL's spec fields kubedl-py does not implement: refused by name, with what to do instead
KUBEDL_ONLY_SPEC_FIELDS: dict[str, str] = {
    "cronPolicy": f"{_NOT_SUPPORTED} (cron-scheduled jobs): remove it and run the job from a CronJob or your scheduler",
    "modelVersion": f"{_NOT_SUPPORTED} (model versions): remove it and publish the model from the training program",
    "cacheBackend": f"{_NOT_SUPPORTED} (dataset cache backends): remove it and mount the data with a volume",
}
#: the same for fields of a replica spec
KUBEDL_ONLY_REPLICA_FIELDS: dict[str, str] = {
    "spotReplicaSpec": f"{_NOT_SUPPORTED} (spot replicas): remove it and give the replica type all its replicas",
}

# A Service name (and so our job-name prefix) is an RFC 1035 label.
_DNS_1035 = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# generateName gets this many random characters appended by the API server.
_GENERATED_SUFFIX = 5
# A resource name in ``resources.limits``: an optional DNS-subdomain prefix and a name (``rdma/hca``).
_RESOURCE_NAME = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
# An environment variable name as the API server accepts it (C identifier, plus '.' and '-').
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")


def parse_job(data: Any, *, source: str | None = None, pod_fields: bool = False) -> Job:
    """Build a validated job from a raw document; raise ``JobValidationError`` otherwise (``pod_fields``: as
    :func:`validate_job`)."""
    subject = source or "job"
    if not isinstance(data, Mapping):
        raise JobValidationError(
            [FieldError("(document)", f"expected a mapping (a job object), got {type(data).__name__}")],
            subject=subject,
        )
    kind = data.get("kind")
    api_version = data.get("apiVersion")
    registered = {entry.kind: entry for entry in all_kinds()}
    if kind not in registered:
        names = ", ".join(registered)
        raise JobValidationError(
            [
                FieldError(
                    "kind", f"{kind!r} is not a training job kind{_closest_kind(kind, registered)}; use one of {names}"
                )
            ],
            subject=subject,
        )
    plugin = registered[kind]
    group = group_of(api_version)
    if group is None or group not in plugin.groups:
        served = " or ".join(g.api_version for g in plugin.groups)
        raise JobValidationError(
            [FieldError("apiVersion", f"{api_version!r} is not served for {kind}; use {served}")],
            subject=subject,
        )
    document, misplaced = to_internal(data, group)
    nested = _written_under_run_policy(data, group)
    problems = [FieldError(path, fix) for path, fix in misplaced]
    problems += _unsupported(document, plugin)
    problems += _normalise_replica_types(document, plugin.framework)
    if problems:
        raise JobValidationError(problems, subject=subject)
    try:
        job: Job = plugin.model.model_validate(document)
    except pydantic.ValidationError as exc:
        raise JobValidationError(_as_written(_from_pydantic(exc), group, nested), subject=subject) from None
    errors = _as_written(validate_job(job, pod_fields=pod_fields), group, nested)
    if errors:
        raise JobValidationError(errors, subject=subject)
    return job


def _closest_kind(kind: object, registered: Mapping[str, KindAPI]) -> str:
    """`` (did you mean PyTorchJob?)`` for a kind that is one of ours but for its letter case or a typo."""
    if not isinstance(kind, str) or not kind:
        return ""
    by_lower = {name.lower(): name for name in registered}
    close = difflib.get_close_matches(kind.lower(), list(by_lower), n=1, cutoff=0.75)
    return f" (did you mean {by_lower[close[0]]}?)" if close else ""


def _written_under_run_policy(data: Mapping[str, Any], group: ApiGroup) -> set[str]:
    """The keys the user wrote under ``spec.runPolicy`` (lifted into ``spec`` for the model), unknown ones too."""
    spec = data.get("spec")
    policy = spec.get(group.run_policy_field or "runPolicy") if isinstance(spec, Mapping) else None
    return {str(key) for key in policy} if isinstance(policy, Mapping) else set()


def _as_written(errors: list[FieldError], group: ApiGroup, nested: AbstractSet[str] = frozenset()) -> list[FieldError]:
    """Errors found on the one model, at the paths the user wrote (``spec.runPolicy.*`` in kubeflow.org, and
    wherever the user put a field under ``spec.runPolicy``: ``runPolicy: {bogus: 1}`` is
    ``spec.runPolicy.bogus``, not ``spec.bogus``)."""
    out = []
    policy = group.run_policy_field or "runPolicy"
    for error in errors:
        field = wire_path(error.field, group)
        if field == error.field and field.startswith("spec."):
            key = re.split(r"[.\[]", field[len("spec.") :], maxsplit=1)[0]
            if key in nested:
                field = f"spec.{policy}.{field[len('spec.') :]}"
        out.append(FieldError(field, error.message))
    return out


def _unsupported(document: Mapping[str, Any], plugin: KindAPI) -> list[FieldError]:
    """KubeDL's fields kubedl-py does not implement, refused by name (not as unknown fields)."""
    spec = document.get("spec")
    if not isinstance(spec, Mapping):
        return []
    errors = [FieldError(f"spec.{key}", why) for key, why in KUBEDL_ONLY_SPEC_FIELDS.items() if key in spec]
    specs = spec.get(plugin.framework.replica_specs_field)
    if isinstance(specs, Mapping):
        for replica_type, replica in specs.items():
            if isinstance(replica, Mapping):
                errors += [
                    FieldError(f"spec.{plugin.framework.replica_specs_field}.{replica_type}.{key}", why)
                    for key, why in KUBEDL_ONLY_REPLICA_FIELDS.items()
                    if key in replica
                ]
    return errors


def _normalise_replica_types(document: dict[str, Any], framework: Framework) -> list[FieldError]:
    """Replica types in any letter case (``worker``, ``ps``) become the canonical ones (``Worker``, ``PS``), in
    place, as both peers' defaulting does; the same type twice in different cases is an error."""
    spec = document.get("spec")
    field = framework.replica_specs_field
    if not isinstance(spec, dict) or not isinstance(spec.get(field), Mapping):
        return []
    canonical = {t.lower(): t for t in framework.replica_types}
    renamed: dict[str, Any] = {}
    errors: list[FieldError] = []
    for key, value in spec[field].items():
        name = canonical.get(str(key).lower(), key)
        if name in renamed:
            errors.append(
                FieldError(f"spec.{field}.{key}", f"is {name} again in another letter case: keep one of them")
            )
            continue
        renamed[name] = value
    spec[field] = renamed
    return errors


def validate_job(job: Job, *, pod_fields: bool = False) -> list[FieldError]:
    """Semantic checks the schema cannot express; an empty list means the job is valid. ``pod_fields``: also
    refuse pod template fields Kubernetes does not have (:func:`check_pod_fields`), as the CLI and SDK do."""
    errors: list[FieldError] = []
    errors += _check_name(job)
    errors += _check_replica_types(job)
    errors += kind_api(job.kind).validate(job)
    errors += _check_totals(job)
    errors += _check_scheduling(job)
    errors += _check_completion(job)
    errors += _check_rdma(job)
    errors += _check_network_mode(job)
    errors += _check_resources(job)
    errors += _check_replica_services(job)
    if pod_fields:
        errors += check_pod_fields(job)
    return errors


def _unknown(keys: object, known: frozenset[str], path: str, what: str) -> list[FieldError]:
    """A FieldError per key of ``keys`` (a mapping's) that ``what`` does not have, with the closest real one."""
    if not isinstance(keys, Mapping):
        return []
    errors = []
    for key in keys:
        if key in known:
            continue
        close = difflib.get_close_matches(str(key), sorted(known), n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]}?)" if close else ""
        errors.append(
            FieldError(
                f"{path}.{key}",
                f"is not a field of a {what} in Kubernetes {podfields.RELEASE}{hint}; check its spelling and "
                "indentation",
            )
        )
    return errors


def check_pod_fields(job: Job) -> list[FieldError]:
    """Every pod template holds only the fields of a pod template, its spec a PodSpec's, each container a
    Container's: the API server keeps a misspelt ``comand:`` in the job (its templates are free-form) and the
    pod create fails later, so it is refused here, before anything is sent (podfields.py). Client-side only
    (the CLI, the SDK: ``pod_fields=True``): the controller does not refuse a stored job for a field a newer
    Kubernetes than the lists' added."""
    errors: list[FieldError] = []
    for replica_type, spec in job.replica_specs.items():
        path = f"{_specs_path(job)}.{replica_type}.template"
        template = spec.template.model_dump(by_alias=True, exclude_unset=True)
        errors += _unknown(template, podfields.POD_TEMPLATE, path, "pod template")
        errors += _unknown(template.get("metadata"), podfields.OBJECT_META, f"{path}.metadata", "pod's metadata")
        pod = template.get("spec")
        errors += _unknown(pod, podfields.POD_SPEC, f"{path}.spec", "PodSpec")
        if not isinstance(pod, Mapping):
            continue
        for field in ("initContainers", "containers"):
            for i, container in enumerate(pod.get(field) or []):
                errors += _unknown(container, podfields.CONTAINER, f"{path}.spec.{field}[{i}]", "Container")
    return errors


def _check_replica_services(job: Job) -> list[FieldError]:
    """``kubedl.io/replica-services`` is ``dialed`` or ``all``, exactly: a misspelt ``All`` must not leave a
    script that resolves every replica's name without its Services."""
    wanted = (job.metadata.annotations or {}).get(c.ANNOTATION_REPLICA_SERVICES)
    if wanted is None or wanted in c.REPLICA_SERVICES:
        return []
    return [
        FieldError(
            f"metadata.annotations[{c.ANNOTATION_REPLICA_SERVICES}]",
            f"{wanted!r} is not a choice of Services; use 'dialed' (a Service only for the replicas their peers "
            "dial) or 'all' (one per replica, as the Training Operator makes them); the value is case-sensitive",
        )
    ]


def _check_network_mode(job: Job) -> list[FieldError]:
    """``kubedl.io/network-mode`` is ``host`` or ``pod``, exactly: a misspelt ``Host`` must not run the job in
    the other mode silently; a template's own ``hostNetwork: true`` contradicts an explicit ``pod``."""
    mode = (job.metadata.annotations or {}).get(c.ANNOTATION_NETWORK_MODE)
    field = f"metadata.annotations[{c.ANNOTATION_NETWORK_MODE}]"
    if mode is not None and mode not in c.NETWORK_MODES:
        return [
            FieldError(
                field,
                f"{mode!r} is not a network mode; use 'host' (the node's network: host ports chosen per pod, "
                "ClusterIP Services forwarding to them) or 'pod' (the pod network, also what no annotation means); "
                "the value is case-sensitive",
            )
        ]
    if mode == c.NETWORK_MODE_POD:
        return [
            FieldError(
                f"{_specs_path(job)}.{replica_type}.template.spec.hostNetwork",
                f"is true but the job's {c.ANNOTATION_NETWORK_MODE} annotation says 'pod': remove hostNetwork from "
                "the template, or set the annotation to 'host' for the node's network",
            )
            for replica_type in job.host_network_templates
        ]
    return []


def host_port_count(job: Job, replica_type: str) -> int:
    """The host ports one pod of ``replica_type`` holds: in host-network mode the framework's port plus every
    other port its template declares (Kubernetes makes each a hostPort); in the pod network those declared
    with a ``hostPort``."""
    spec = job.replica_specs[replica_type].template.to_dict().get("spec") or {}
    declared = [
        port
        for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
        for port in container.get("ports") or []
        if isinstance(port, Mapping)
    ]
    if job.host_network:
        return 1 + sum(1 for port in declared if port.get("name") != job.framework.port_name)
    return sum(1 for port in declared if port.get("hostPort"))


def host_port_errors(job: Job, limit: int | None) -> list[FieldError]:
    """Pods that would hold more than ``limit`` host ports each (``--max-host-ports-per-pod``): refused, so no
    job can take a node's ports in thousands (what the install's admission policy refuses at create)."""
    if limit is None:
        return []
    errors = []
    for replica_type in job.replica_specs:
        count = host_port_count(job, replica_type)
        if count > limit:
            what = (
                "the framework's port and the other ports its containers declare"
                if job.host_network
                else ("ports declared with a hostPort")
            )
            errors.append(
                FieldError(
                    f"{_specs_path(job)}.{replica_type}.template.spec.containers",
                    f"a pod would hold {count} host ports ({what}), more than the {limit} a pod may hold "
                    "(--max-host-ports-per-pod); declare fewer ports",
                )
            )
    return _as_written(errors, job.api_group)


def _specs_path(job: Job) -> str:
    return f"spec.{job.framework.replica_specs_field}"


def _replicas(value: int | None) -> int:
    return DEFAULT_REPLICAS if value is None else value


def _check_name(job: Job) -> list[FieldError]:
    name = job.metadata.name
    generate_name = job.metadata.generate_name
    if (
        name
        and generate_name
        and name.startswith(generate_name)
        and len(name) == len(generate_name) + _GENERATED_SUFFIX
    ):
        # The API server made the name from generateName (the controller's view): the user wrote generateName,
        # so the advice is about it (an adversary got "use at most 53" for a generateName whose limit is 48).
        name = None
    if not name and not generate_name:
        return [FieldError("metadata.name", "a job needs a name; set metadata.name (or metadata.generateName)")]
    field = "metadata.name" if name else "metadata.generateName"
    base = name or (generate_name or "")
    probe = base if name else base + "a"
    if not _DNS_1035.match(probe.rstrip("-") if not name else probe):
        return [
            FieldError(
                field,
                f"{base!r} is not a valid job name: it names Services, so it must be lower-case letters, "
                "digits and '-', start with a letter and end with a letter or digit",
            )
        ]
    length = len(base) + (0 if name else _GENERATED_SUFFIX)
    longest = ""
    for replica_type, spec in job.replica_specs.items():
        last_index = max(_replicas(spec.replicas) - 1, 0)
        suffix = f"-{replica_type.lower()}-{last_index}"
        if len(suffix) > len(longest):
            longest = suffix
    if length + len(longest) > c.MAX_SERVICE_NAME:
        maximum = c.MAX_SERVICE_NAME - len(longest) - (0 if name else _GENERATED_SUFFIX)
        example = f"{base}{'x' * _GENERATED_SUFFIX if not name else ''}{longest}"
        return [
            FieldError(
                field,
                f"{base!r} is too long: the Service name {example!r} would be {len(example)} characters, "
                f"over Kubernetes' {c.MAX_SERVICE_NAME}-character limit; use at most {maximum} characters",
            )
        ]
    return []


def _check_replica_types(job: Job) -> list[FieldError]:
    path = _specs_path(job)
    allowed = job.framework.replica_types
    if not job.replica_specs:
        return [FieldError(path, f"no replicas: add at least one replica type ({', '.join(allowed)})")]
    errors = []
    for replica_type in job.replica_specs:
        if replica_type not in allowed:
            close = difflib.get_close_matches(replica_type.lower(), [t.lower() for t in allowed], n=1, cutoff=0.6)
            hint = next((t for t in allowed if close and t.lower() == close[0]), None)
            fix = f"did you mean {hint!r}?" if hint else f"use one of {', '.join(allowed)}"
            errors.append(FieldError(f"{path}.{replica_type}", f"unknown replica type for {job.kind}; {fix}"))
    return errors


def _check_totals(job: Job) -> list[FieldError]:
    total = sum(_replicas(spec.replicas) for spec in job.replica_specs.values())
    if job.replica_specs and total == 0:
        # Accepted, it would stay Created for ever: no pod to make, so nothing ever succeeds or fails.
        counts = ", ".join(f"{name} 0" for name in job.replica_specs)
        return [
            FieldError(
                _specs_path(job),
                f"has no replica to run ({counts}): give at least one replica type replicas >= 1",
            )
        ]
    if total > c.MAX_TOTAL_REPLICAS:
        return [
            FieldError(
                _specs_path(job),
                f"asks for {total} replicas in all; a job may have at most {c.MAX_TOTAL_REPLICAS}: lower the replicas",
            )
        ]
    return []


def _check_scheduling(job: Job) -> list[FieldError]:
    """A gang larger than the job can never be complete: its pods would wait forever for members that do
    not exist (refused in training.kubedl.io; kubeflow.org keeps the Training Operator's semantics: the job
    waits, saying why, until ``minAvailable`` is lowered: ``gang.py``). minResources values must be quantities
    (the PodGroup's API server would refuse them later, where the user does not look)."""
    policy = job.run_policy.scheduling_policy
    if policy is None:
        return []
    errors: list[FieldError] = []
    total = sum(_replicas(spec.replicas) for spec in job.replica_specs.values())
    waits = job.api_group == KUBEFLOW
    if policy.min_available is not None and policy.min_available > total and not waits:
        errors.append(
            FieldError(
                "spec.schedulingPolicy.minAvailable",
                f"is {policy.min_available} but the job has {total} replicas in all: the gang could never be "
                f"complete and its pods would wait forever; set it to at most {total} (or leave it unset: all "
                "replicas)",
            )
        )
    for name, value in (policy.min_resources or {}).items():
        try:
            quantity_value(value)
        except ValueError:
            errors.append(
                FieldError(
                    f"spec.schedulingPolicy.minResources.{name}",
                    f"{value!r} is not a Kubernetes quantity; write it like 8, 500m or 64Gi",
                )
            )
    return errors


def _check_completion(job: Job) -> list[FieldError]:
    """A completionPolicy must count a replica type the job has, with a threshold it can reach."""
    policy = job.run_policy.completion_policy
    if policy is None:
        return []
    path = "spec.completionPolicy"
    replica_type = policy.replica_type or job.framework.worker_type
    if replica_type not in job.replica_specs:
        types = ", ".join(job.replica_specs)
        return [FieldError(f"{path}.replicaType", f"{replica_type!r} is not a replica type of this job ({types})")]
    if policy.min_succeeded is None and policy.max_failed is None:
        return [FieldError(path, "says nothing: set minSucceeded, maxFailed or both")]
    total = _replicas(job.replica_specs[replica_type].replicas)
    if isinstance(policy.min_succeeded, int) and not 1 <= policy.min_succeeded <= total:
        return [
            FieldError(
                f"{path}.minSucceeded",
                f"is {policy.min_succeeded} but the job has {total} {replica_type} replicas: use 1 to {total}, or a "
                "share such as '75%'",
            )
        ]
    return []


def _check_resources(job: Job) -> list[FieldError]:
    """Every container's ``resources`` hold quantities, none negative, no request above its limit: what the API
    server would refuse only when the controller creates the pod, in a message about the pod that names
    neither the replica type nor the job's field."""
    errors: list[FieldError] = []
    for replica_type, spec in job.replica_specs.items():
        pod = spec.template.spec
        extra = pod.model_extra or {}
        groups: list[tuple[str, list[Any]]] = [
            ("containers", [ct.model_dump(by_alias=True) for ct in pod.containers]),
            ("initContainers", list(extra.get("initContainers") or [])),
        ]
        for field, containers in groups:
            for i, container in enumerate(containers):
                path = f"{_specs_path(job)}.{replica_type}.template.spec.{field}[{i}].resources"
                resources = container.get("resources") if isinstance(container, Mapping) else None
                if isinstance(resources, Mapping):
                    errors += _check_resource_lists(resources, path)
    return errors


def _check_resource_lists(resources: Mapping[str, Any], path: str) -> list[FieldError]:
    errors: list[FieldError] = []
    values: dict[str, dict[str, Any]] = {}
    for kind in ("requests", "limits"):
        quantities = resources.get(kind)
        if not isinstance(quantities, Mapping):
            continue
        values[kind] = {}
        for name, value in quantities.items():
            try:
                number = quantity_value(value)
            except (ValueError, TypeError):
                errors.append(
                    FieldError(
                        f"{path}.{kind}.{name}",
                        f"{value!r} is not a Kubernetes quantity; write it like 2, 500m or 16Gi",
                    )
                )
                continue
            if number < 0:
                errors.append(FieldError(f"{path}.{kind}.{name}", f"is {value!r}; it must not be negative"))
                continue
            values[kind][name] = number
    for name, request in values.get("requests", {}).items():
        limit = values.get("limits", {}).get(name)
        if limit is not None and request > limit:
            errors.append(
                FieldError(
                    f"{path}.requests.{name}",
                    f"is {resources['requests'][name]!r}, more than its limit {resources['limits'][name]!r}: "
                    "a request may be at most its limit",
                )
            )
    return errors


def parse_rdma(data: Any, *, source: str | None = None) -> RdmaSpec:
    """An ``RdmaSpec`` from a raw mapping (the controller's ``--rdma-defaults`` file), checked like a job's."""
    subject = source or "rdma settings"
    try:
        rdma = RdmaSpec.model_validate(data if data is not None else {})
    except pydantic.ValidationError as exc:
        raise JobValidationError(_from_pydantic(exc), subject=subject) from None
    errors = _check_rdma_spec(rdma, "")
    if errors:
        raise JobValidationError(errors, subject=subject)
    return rdma


def _check_rdma(job: Job) -> list[FieldError]:
    rdma = job.run_policy.rdma
    if rdma is None:
        return []
    errors = _check_rdma_spec(rdma, "spec.rdma.")
    dra = rdma.dra
    if dra is not None:
        for name in dra.replica_types or []:
            if name not in job.replica_specs:
                known = ", ".join(job.replica_specs)
                errors.append(
                    FieldError("spec.rdma.dra.replicaTypes", f"names {name!r}, which the job does not have ({known})")
                )
        if (dra.nics_per_gpu or 1) * dra.gpus > 128:
            errors.append(FieldError("spec.rdma.dra", "asks for more than 128 NICs per pod: lower nicsPerGpu"))
    return errors


def _check_rdma_spec(rdma: RdmaSpec, path: str) -> list[FieldError]:
    errors = []
    for name in rdma.devices or {}:
        if not _RESOURCE_NAME.match(name) or len(name) > 253:
            errors.append(
                FieldError(f"{path}devices.{name}", "is not a resource name; use e.g. 'rdma/hca' or 'nvidia.com/gpu'")
            )
    for name in rdma.nccl or {}:
        if not _ENV_NAME.match(name):
            errors.append(
                FieldError(f"{path}nccl.{name}", "is not an environment variable name; use e.g. 'NCCL_IB_HCA'")
            )
    per_gpu = rdma.per_gpu
    if per_gpu is not None and per_gpu.resource is None and per_gpu.network is None:
        errors.append(
            FieldError(f"{path}perGpu", "names neither a resource nor a network: set resource and/or network")
        )
    return errors


# Friendlier words for fields whose pydantic message would not say the fix.
_FIELD_HINTS = {
    "containers": "a pod template needs at least one container: add one with a name and an image",
    "nprocPerNode": "must be a positive integer or one of 'auto', 'cpu', 'gpu'",
}


def _from_pydantic(exc: pydantic.ValidationError) -> list[FieldError]:
    """One FieldError per field (union alternatives collapse into one), in the order pydantic found them."""
    by_field: dict[str, str] = {}
    for error in exc.errors():
        # Union members show up as extra path parts such as "int" or "constrained-str"; drop them.
        loc = [
            str(part)
            for part in error["loc"]
            if not str(part).startswith(("function-", "constrained-")) and part not in ("int", "str", "bool")
        ]
        field = _dotted(loc)
        if field in by_field:
            continue
        leaf = next((part for part in reversed(loc) if not part.isdigit()), "")
        by_field[field] = _message(leaf, error)
    return [FieldError(field, message) for field, message in by_field.items()]


def _dotted(loc: list[str]) -> str:
    """``["spec", "containers", "0", "image"]`` -> ``spec.containers[0].image``, as Kubernetes prints paths."""
    text = ""
    for part in loc:
        text += f"[{part}]" if part.isdigit() else (f".{part}" if text else part)
    return text or "(document)"


def _message(leaf: str, error: Any) -> str:
    kind = error["type"]
    ctx = error.get("ctx") or {}
    got = f" (got {error['input']!r})" if "input" in error and kind != "missing" else ""
    if leaf in _FIELD_HINTS and kind != "missing":
        return _FIELD_HINTS[leaf] + got
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        return "is not a known field; check its spelling and indentation"
    if kind == "greater_than_equal":
        return f"must be >= {ctx.get('ge')}{got}"
    if kind == "less_than_equal":
        return f"must be <= {ctx.get('le')}{got}"
    if kind == "string_too_short":
        return "must not be empty"
    if kind in ("int_parsing", "int_type", "int_from_float"):
        return f"must be an integer{got}"
    if kind == "literal_error":
        return f"must be {ctx.get('expected')}{got}"
    return f"{error['msg']}{got}"
