"""The job models by their public names (``PyTorchJob``, ``TFJob``...), gathered from the kind plug-ins.

Each kind lives in ``kubedl_py/api/kinds/`` (see ``kinds/base.py``); this module only re-exports what users
import by name, and the registry-derived lookups generic code uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Generic, TypeVar

from kubedl_py.api.kinds import all_kinds, frameworks, kind_api
from kubedl_py.api.kinds.base import Framework, KindAPI, TrainingJob
from kubedl_py.api.kinds.pytorch import (
    NPROC_WORDS,
    PYTORCH,
    ElasticPolicy,
    NprocPerNode,
    PyTorchJob,
    PyTorchJobSpec,
    RdzvConf,
)
from kubedl_py.api.kinds.tensorflow import TENSORFLOW, TFJob, TFJobSpec

#: any training job, whatever its kind
Job = TrainingJob

V = TypeVar("V")


class _ByKind(Mapping[str, V], Generic[V]):
    """A read-only mapping kind -> ``pick(plug-in)``, read from the registry on every access (so it follows
    ``KINDS``, also when a test registers one more kind)."""

    def __init__(self, pick: Callable[[KindAPI], V]) -> None:
        self._pick = pick

    def _current(self) -> dict[str, V]:
        return {entry.kind: self._pick(entry) for entry in all_kinds()}

    def __getitem__(self, kind: str) -> V:
        return self._current()[kind]

    def __iter__(self) -> Iterator[str]:
        return iter(self._current())

    def __len__(self) -> int:
        return len(self._current())


def _framework(entry: KindAPI) -> Framework:
    return entry.framework


def _model(entry: KindAPI) -> type[TrainingJob]:
    return entry.model


#: kind -> Framework
FRAMEWORKS: Mapping[str, Framework] = _ByKind(_framework)
#: kind -> its model class
JOB_MODELS: Mapping[str, type[TrainingJob]] = _ByKind(_model)


__all__ = [
    "FRAMEWORKS",
    "JOB_MODELS",
    "NPROC_WORDS",
    "PYTORCH",
    "TENSORFLOW",
    "ElasticPolicy",
    "Framework",
    "Job",
    "KindAPI",
    "NprocPerNode",
    "PyTorchJob",
    "PyTorchJobSpec",
    "RdzvConf",
    "TFJob",
    "TFJobSpec",
    "TrainingJob",
    "all_kinds",
    "frameworks",
    "kind_api",
]
