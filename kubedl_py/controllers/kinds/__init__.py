"""The controller halves of the job kinds, found from the API registry (``kubedl_py.api.kinds``).

The registry of kinds is one list, in the API package (the controller imports the API, never the reverse);
each entry names its controller module (``KindAPI.controller_module``, by default ``<this package>.<name>``),
which exposes ``CONTROLLER``, a :class:`~kubedl_py.controllers.kinds.base.Kind`.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from kubedl_py.api.kinds import kind_api
from kubedl_py.api.kinds.base import KindAPI
from kubedl_py.controllers.kinds.base import Kind, OwnedObject, Pods


@functools.cache
def _load(module: str) -> Kind[Any]:
    loaded = importlib.import_module(module)
    controller = getattr(loaded, "CONTROLLER", None)
    if not isinstance(controller, Kind):
        raise TypeError(f"{module} must define CONTROLLER, a Kind")
    return controller


def controller_for(kind: str | KindAPI) -> Kind[Any]:
    """The controller half of ``kind`` (a kind name or its API plug-in)."""
    plugin = kind if isinstance(kind, KindAPI) else kind_api(kind)
    return _load(plugin.controller_module)


__all__ = ["Kind", "OwnedObject", "Pods", "controller_for"]
