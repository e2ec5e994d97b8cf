"""The registry of job kinds: the one list of them (see ``base.py`` for what a kind plug-in is).

Adding a kind: its API half here (``<name>.py``: model, defaults, validation, CRD rules), its controller half
in ``kubedl_py/controllers/kinds/<name>.py``, and one line in ``KINDS`` below. tests/kinds/test_plugins.py
registers a fifth kind that way (two files, one line) and finds it in the CRDs, the install manifests,
parsing and the controller: nothing else lists kinds.
"""

from __future__ import annotations

from kubedl_py.api.kinds import jax, mpi, paddle, pytorch, tensorflow, xgboost
from kubedl_py.api.kinds.base import Framework, KindAPI, TrainingJob

KINDS: tuple[KindAPI, ...] = (
    pytorch.KIND,
    tensorflow.KIND,
    mpi.KIND,
    xgboost.KIND,
    paddle.KIND,
    jax.KIND,
)


def all_kinds() -> tuple[KindAPI, ...]:
    """Every registered kind, in registry order (read at call time, so tests may extend ``KINDS``)."""
    return KINDS


def kind_api(kind: str) -> KindAPI:
    """The plug-in of ``kind`` (e.g. ``"PyTorchJob"``); KeyError for a kind that is not registered."""
    for entry in all_kinds():
        if entry.kind == kind:
            return entry
    raise KeyError(kind)


def frameworks() -> dict[str, Framework]:
    return {entry.kind: entry.framework for entry in all_kinds()}


__all__ = ["KINDS", "Framework", "KindAPI", "TrainingJob", "all_kinds", "frameworks", "kind_api"]
