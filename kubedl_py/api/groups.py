"""The two API groups a kind is served in: ``training.kubedl.io/v1alpha1`` and, opt-in, ``kubeflow.org/v1``.

Why one model for both: the two layouts differ only in where the run policy lives (inline in ``spec`` in
KubeDL's group, under ``spec.runPolicy`` in the Training Operator's) and in the names on the objects a job
makes (pod labels, condition reasons, metric names). So a job of either group is parsed into the same model
(``runPolicy`` lifted into ``spec`` on the way in, put back on the way out), and everything that reads a
job — defaults, validation, the controller, the SDK — is one code path. What differs is looked up here, by
the job's ``apiVersion``:

- the wire layout (:func:`to_internal` / :func:`to_wire`, and the CRD schema built from the same list);
- the peer's pod labels a ``kubeflow.org`` job's pods carry besides ours (:func:`peer_labels`);
- the condition reasons (:func:`condition_reason`): KubeDL's ``JobCreated``, the Training Operator's
  ``PyTorchJobCreated``;
- which replicas get a Service by default (``service_per_replica``): the Training Operator's one per replica,
  or only the replicas their peers dial (docs/controller.md, "Services").

The tables are in docs/migration.md, side by side.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

#: run-policy fields: inline in ``spec`` in training.kubedl.io, under ``spec.runPolicy`` in kubeflow.org
RUN_POLICY_FIELDS: Final = (
    "cleanPodPolicy",
    "ttlSecondsAfterFinished",
    "activeDeadlineSeconds",
    "backoffLimit",
    "schedulingPolicy",
    "suspend",
    "managedBy",
    # kubedl-py's own (docs/policies.md): under runPolicy in kubeflow.org, like the fields above
    "failurePolicy",
    "completionPolicy",
    "progressDeadlineSeconds",
)


@dataclass(frozen=True)
class ApiGroup:
    """One API group/version the kinds are served in, and the names its users rely on."""

    #: short name used in flags and messages: ``kubedl`` or ``kubeflow``
    name: str
    group: str
    version: str
    #: the spec field holding the run policy; None: the run-policy fields sit inline in ``spec``
    run_policy_field: str | None
    #: prefix of the peer's own pod labels (``training.kubeflow.org``); None: only ours
    peer_label_prefix: str | None
    #: condition reasons are ``<Kind><Condition>`` (the Training Operator) rather than ``Job<Condition>``
    kind_reasons: bool
    #: CRD category, so ``kubectl get <category>`` lists every kind of the group
    category: str
    #: a Service for every replica by default (the Training Operator's: users' scripts may resolve any
    #: replica's name); False: only for the replicas peers dial (annotation ``kubedl.io/replica-services``)
    service_per_replica: bool = False

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"


KUBEDL: Final = ApiGroup(
    name="kubedl",
    group="training.kubedl.io",
    version="v1alpha1",
    run_policy_field=None,
    peer_label_prefix=None,
    kind_reasons=False,
    category="kubedl",
)
KUBEFLOW: Final = ApiGroup(
    name="kubeflow",
    group="kubeflow.org",
    version="v1",
    run_policy_field="runPolicy",
    peer_label_prefix="training.kubeflow.org",
    kind_reasons=True,
    category="kubeflow",
    service_per_replica=True,
)
GROUPS: Final = (KUBEDL, KUBEFLOW)

#: the Training Operator's ``runPolicy.managedBy`` for jobs it (and so kubedl-py, its drop-in) reconciles
KUBEFLOW_MANAGER: Final = "kubeflow.org/training-operator"
#: the value naming kubedl-py itself
KUBEDL_MANAGER: Final = "kubedl.io/kubedl-py"
#: MultiKueue's: the job is dispatched to a worker cluster and mirrored back; not reconciled here
MULTIKUEUE_MANAGER: Final = "kueue.x-k8s.io/multikueue"
#: ``managedBy`` values whose jobs kubedl-py reconciles; any other value (MultiKueue's) belongs to someone else
OWN_MANAGERS: Final = (KUBEFLOW_MANAGER, KUBEDL_MANAGER)


def group_of(api_version: object) -> ApiGroup | None:
    """The group served at ``api_version`` (``kubeflow.org/v1``), or None."""
    for group in GROUPS:
        if group.api_version == api_version:
            return group
    return None


def to_internal(document: Mapping[str, Any], group: ApiGroup) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """The document in the one layout the models read (run policy inline in ``spec``), and the fields that
    sit in the wrong place for ``group`` as ``(path, fix)`` pairs. The input is not changed.

    ``spec.runPolicy`` is read in both groups: it is the Training Operator's layout, and KubeDL's own MPIJob
    writes it too. Only kubeflow.org refuses run-policy fields inline (its CRD has no such fields)."""
    body = dict(document)
    spec = body.get("spec")
    if not isinstance(spec, Mapping):
        return body, []
    spec = dict(spec)
    misplaced: list[tuple[str, str]] = []
    nested = group.run_policy_field or "runPolicy"
    policy = spec.pop(nested, None)
    if group.run_policy_field is not None:
        misplaced += [
            (f"spec.{key}", f"{group.api_version} keeps it under spec.{nested}: move it to spec.{nested}.{key}")
            for key in RUN_POLICY_FIELDS
            if key in spec
        ]
    if isinstance(policy, Mapping):
        for key, value in policy.items():
            if key in spec and group.run_policy_field is None:
                misplaced.append((f"spec.{nested}.{key}", f"is also set as spec.{key}: keep one of them"))
            spec[key] = value
    elif policy is not None:
        misplaced.append((f"spec.{nested}", "must be an object"))
    body["spec"] = spec
    return body, misplaced


def wire_path(path: str, group: ApiGroup) -> str:
    """A field path of the internal layout as the user wrote it (``spec.backoffLimit`` ->
    ``spec.runPolicy.backoffLimit`` in kubeflow.org)."""
    if group.run_policy_field is None:
        return path
    for key in RUN_POLICY_FIELDS:
        prefix = f"spec.{key}"
        if path == prefix or path.startswith((prefix + ".", prefix + "[")):
            return f"spec.{group.run_policy_field}.{path[len('spec.') :]}"
    return path


def to_wire(body: dict[str, Any], group: ApiGroup) -> dict[str, Any]:
    """The internal layout back in ``group``'s (run policy nested again); ``body`` is not changed."""
    if group.run_policy_field is None or not isinstance(body.get("spec"), Mapping):
        return body
    out = dict(body)
    spec = dict(body["spec"])
    policy = {key: spec.pop(key) for key in RUN_POLICY_FIELDS if key in spec}
    if policy:
        spec[group.run_policy_field] = policy
    out["spec"] = spec
    return out


def peer_labels(
    group: ApiGroup, kind: str, job_name: str, replica_type: str, index: int, *, master: bool
) -> dict[str, str]:
    """The labels the Training Operator puts on a job's pods and Services (none for training.kubedl.io): its
    selectors, PodMonitors and dashboards keep working on kubedl-py's pods."""
    prefix = group.peer_label_prefix
    if prefix is None:
        return {}
    labels = {
        f"{prefix}/operator-name": f"{kind.lower()}-controller",
        f"{prefix}/job-name": job_name.replace("/", "-"),
        f"{prefix}/replica-type": replica_type.lower(),
        f"{prefix}/replica-index": str(index),
    }
    if master:
        labels[f"{prefix}/job-role"] = "master"
    return labels


#: KubeDL's reasons per condition (kubedl-py's since the start); the Training Operator's are ``<Kind><word>``
_KUBEDL_REASONS: Final = {
    "Created": "JobCreated",
    "Running": "JobRunning",
    "Restarting": "JobRestarting",
    "Succeeded": "JobSucceeded",
    "Failed": "JobFailed",
    "Suspended": "JobSuspended",
    "Resumed": "JobResumed",
}


def condition_reason(group: ApiGroup, kind: str, word: str, specific: str | None = None) -> str:
    """The reason of a condition change: ``word`` is Created, Running, Restarting, Succeeded, Failed, Suspended
    or Resumed. In training.kubedl.io a failure keeps its specific reason (``BackoffLimitExceeded``); in
    kubeflow.org every reason is the Training Operator's ``<Kind><word>`` (``PyTorchJobFailed``), which is
    what its users' alerts match, and the specific cause is in the message."""
    if group.kind_reasons:
        return f"{kind}{word}"
    return specific or _KUBEDL_REASONS[word]
