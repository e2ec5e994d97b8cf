"""The job kinds the SDK knows: their API resources, the names users may call them by, and their models."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from kubedl_py.api import constants as c
from kubedl_py.api.jobs import JOB_MODELS, Job
from kubedl_py.kube.resources import Resource

PYTORCHJOBS: Final = Resource(c.GROUP, c.VERSION, c.PYTORCH_PLURAL, c.PYTORCH_KIND)
TFJOBS: Final = Resource(c.GROUP, c.VERSION, c.TF_PLURAL, c.TF_KIND)
RESOURCES: Final = {c.PYTORCH_KIND: PYTORCHJOBS, c.TF_KIND: TFJOBS}
_KIND_ALIASES: Final = {
    "pytorchjob": c.PYTORCH_KIND,
    "pytorchjobs": c.PYTORCH_KIND,
    "pytorch": c.PYTORCH_KIND,
    "tfjob": c.TF_KIND,
    "tfjobs": c.TF_KIND,
    "tf": c.TF_KIND,
    "tensorflow": c.TF_KIND,
}


def canonical_kind(kind: str | None) -> str | None:
    if kind is None:
        return None
    canonical = _KIND_ALIASES.get(kind.lower().split(".")[0])
    if canonical is None:
        raise ValueError(f"unknown job kind {kind!r}: use PyTorchJob or TFJob")
    return canonical


def to_model(obj: Mapping[str, Any]) -> Job:
    """A job from the server's answer (already validated when created; status may be anything)."""
    model = JOB_MODELS[str(obj.get("kind"))]
    return model.model_validate(dict(obj))
