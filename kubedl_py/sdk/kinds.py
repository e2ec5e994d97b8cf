"""The job kinds the SDK knows: their API resources, the names users may call them by, and their models.

Everything here is read from the kind registry (:func:`kubedl_py.api.kinds.all_kinds`) when asked, so every
registered kind (PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob, and any kind a plug-in adds) works with
get, list, describe, logs, wait, watch and delete, by its kind, plural, short names or framework name.

A kind the Training Operator also has is served in two API groups when the cluster opts in (``kubeflow.org``,
``local up --kubeflow-api``): the same name may then mean a job in either. ``pytorchjobs.kubeflow.org``
(kubectl's ``resource.group``) names one group; a bare kind means both (:func:`job_resources`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from typing import Any

from kubedl_py.api.groups import GROUPS, KUBEDL, ApiGroup, group_of, to_internal
from kubedl_py.api.jobs import JOB_MODELS, Job
from kubedl_py.api.kinds import KindAPI, all_kinds
from kubedl_py.kube.resources import Resource


def resource_of(plugin: KindAPI) -> Resource:
    framework = plugin.framework
    return Resource(plugin.group, plugin.version, framework.plural, framework.kind)


def kind_names() -> str:
    """``PyTorchJob, TFJob, ...``: the registered kinds, for messages."""
    return ", ".join(plugin.kind for plugin in all_kinds())


def _aliases() -> dict[str, str]:
    aliases: dict[str, str] = {}
    for plugin in all_kinds():
        framework = plugin.framework
        for alias in (framework.singular, framework.plural, plugin.name, *framework.short_names, *framework.aliases):
            aliases[alias.lower()] = framework.kind
    return aliases


def canonical_kind(kind: str | None) -> str | None:
    """The kind named by ``kind`` (``"pytorchjob"``, ``"ptj"``, ``"xgboostjobs.training.kubedl.io"``...)."""
    return parse_kind(kind)[0]


def parse_kind(kind: str | None) -> tuple[str | None, ApiGroup | None]:
    """The kind and, when ``kind`` names one (``pytorchjobs.kubeflow.org``, ``pytorchjob.v1.kubeflow.org``),
    the API group; ValueError naming the kinds (and the closest one) for a name that is none of them."""
    if kind is None:
        return None, None
    name, _, rest = kind.partition(".")
    canonical = _aliases().get(name.lower())
    if canonical is None:
        raise ValueError(f"unknown job kind {kind!r}{_did_you_mean(name)}: use one of {kind_names()}")
    if not rest:
        return canonical, None
    for group in GROUPS:
        if rest.lower() in (group.group, f"{group.version}.{group.group}"):
            plugin = next(p for p in all_kinds() if p.kind == canonical)
            if group not in plugin.groups:
                raise ValueError(f"{canonical} is not served in {group.group}; use {canonical} (training.kubedl.io)")
            return canonical, group
    groups = " or ".join(group.group for group in GROUPS)
    raise ValueError(f"unknown API group {rest!r} in {kind!r}: job kinds are served in {groups}")


def _did_you_mean(name: str) -> str:
    close = difflib.get_close_matches(name.lower(), list(_aliases()), n=1, cutoff=0.75)
    return f" (did you mean {_aliases()[close[0]]}?)" if close else ""


def job_resources(kind: str | None, group: ApiGroup | None, kubeflow_served: bool) -> list[Resource]:
    """The API resources a job of ``kind`` (every kind: ``None``) in ``group`` (both: ``None``) may be in;
    kubeflow.org only when the cluster serves it."""
    out = []
    for plugin in all_kinds():
        if kind is not None and plugin.kind != kind:
            continue
        for served in plugin.groups:
            if (group is None and (served is KUBEDL or kubeflow_served)) or served is group:
                out.append(Resource(served.group, served.version, plugin.framework.plural, plugin.kind))
    return out


def resource_of_object(obj: Mapping[str, Any]) -> Resource:
    """The API resource of a job object as the server returned it (its ``apiVersion`` and ``kind``)."""
    return resource_for(to_model(obj))


def resource_for(job: Job) -> Resource:
    """The API resource of ``job`` in the group it was written for (training.kubedl.io or kubeflow.org)."""
    group = job.api_group
    framework = job.framework
    return Resource(group.group, group.version, framework.plural, framework.kind)


def to_model(obj: Mapping[str, Any]) -> Job:
    """A job from the server's answer (already validated when created; status may be anything), in either
    API group: a kubeflow.org job's ``runPolicy`` is lifted into the one model, as ``parse_job`` does."""
    model = JOB_MODELS[str(obj.get("kind"))]
    body, _ = to_internal(obj, group_of(obj.get("apiVersion")) or KUBEDL)
    return model.model_validate(body)
