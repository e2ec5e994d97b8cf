"""The job kinds the SDK knows: their API resources, the names users may call them by, and their models.

Everything here is read from the kind registry (:func:`kubedl_py.api.kinds.all_kinds`) when asked, so every
registered kind (PyTorchJob, TFJob, XGBoostJob, PaddleJob, JAXJob, and any kind a plug-in adds) works with
get, list, describe, logs, wait, watch and delete, by its kind, plural, short names or framework name.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

from kubedl_py.api import constants as c
from kubedl_py.api.groups import KUBEDL, group_of, to_internal
from kubedl_py.api.jobs import JOB_MODELS, Job
from kubedl_py.api.kinds import KindAPI, all_kinds
from kubedl_py.kube.resources import Resource

PYTORCHJOBS: Final = Resource(c.GROUP, c.VERSION, c.PYTORCH_PLURAL, c.PYTORCH_KIND)
TFJOBS: Final = Resource(c.GROUP, c.VERSION, c.TF_PLURAL, c.TF_KIND)
#: names users know from elsewhere (the Training Operator's SDK, TensorFlow) beyond each kind's own
_EXTRA_ALIASES: Final = {"tf": c.TF_KIND, "tensorflow": c.TF_KIND}


def resource_of(plugin: KindAPI) -> Resource:
    framework = plugin.framework
    return Resource(plugin.group, plugin.version, framework.plural, framework.kind)


class _Resources(Mapping[str, Resource]):
    """kind -> its API resource, for every registered kind, in registry order (read on every access)."""

    def _current(self) -> dict[str, Resource]:
        return {plugin.kind: resource_of(plugin) for plugin in all_kinds()}

    def __getitem__(self, kind: str) -> Resource:
        return self._current()[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())


RESOURCES: Final[Mapping[str, Resource]] = _Resources()


def kind_names() -> str:
    """``PyTorchJob, TFJob, ...``: the registered kinds, for messages."""
    return ", ".join(plugin.kind for plugin in all_kinds())


def _aliases() -> dict[str, str]:
    aliases = dict(_EXTRA_ALIASES)
    for plugin in all_kinds():
        framework = plugin.framework
        for alias in (framework.singular, framework.plural, plugin.name, *framework.short_names):
            aliases[alias.lower()] = framework.kind
    return aliases


def canonical_kind(kind: str | None) -> str | None:
    """The kind named by ``kind`` (``"pytorchjob"``, ``"ptj"``, ``"xgboostjobs.training.kubedl.io"``...)."""
    if kind is None:
        return None
    canonical = _aliases().get(kind.lower().split(".")[0])
    if canonical is None:
        raise ValueError(f"unknown job kind {kind!r}: use one of {kind_names()}")
    return canonical


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
