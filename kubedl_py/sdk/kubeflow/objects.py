"""Job and pod objects as the Kubeflow training SDK hands them over, in both directions.

Why its own module: a Kubeflow script builds jobs from the Kubeflow SDK's model classes (or the kubernetes
client's, or dicts) and reads what comes back by snake_case attributes (``job.spec.run_policy.backoff_limit``,
``job.status.conditions[-1].type``, ``pod.metadata.name``). So:

- :func:`serialize` turns whatever a caller passes into the JSON the API server takes, exactly as the
  kubernetes client's ``ApiClient.sanitize_for_serialization`` does for those models (names through
  ``attribute_map``, ``None`` attributes dropped, datetimes in ISO format); it also takes kubedl-py's own
  pydantic jobs and the views below.
- :func:`present` lays a job out as the Training Operator does (run policy under ``spec.runPolicy``, at
  least ``{}``, which the Kubeflow models require), whichever group it came from, so one script reads both;
  :func:`in_group_layout` is the way back.
- :class:`Objects` returns the Kubeflow SDK's own model classes when the ``kubeflow-training`` package is
  importable (deserialised as it does), and :class:`KubeObject` views with the same attribute paths when not.
"""

from __future__ import annotations

import datetime
import importlib
import json
import keyword
import logging
import pprint
import re
import sys
from collections.abc import Mapping
from typing import Any, Final

from pydantic import BaseModel

from kubedl_py.api.groups import KUBEDL, KUBEFLOW, ApiGroup, group_of, to_internal, to_wire
from kubedl_py.api.kinds.base import TrainingJob
from kubedl_py.api.plain import parse_time

__all__ = ["KubeObject", "Objects", "camel", "in_group_layout", "kubeflow_sdk", "present", "serialize", "snake"]

logger = logging.getLogger(__name__)

_PRIMITIVES: Final = (str, bytes, bool, int, float)
#: fields whose keys are data (label names, replica types), not attribute names: kept as they are
_MAP_FIELDS: Final = frozenset(
    {
        "labels",
        "annotations",
        "nodeSelector",
        "limits",
        "requests",
        "capacity",
        "allocatable",
        "allocatedResources",
        "overhead",
        "matchLabels",
        "replicaStatuses",
        "minResources",
        "data",
        "binaryData",
        "stringData",
        "volumeAttributes",
        "parameters",
        "options",
    }
)
#: string fields the kubernetes models read as datetimes (besides every ``*Time`` and ``*Timestamp``)
_TIME_FIELDS: Final = frozenset({"time", "startedAt", "finishedAt"})
#: words the OpenAPI generator escapes besides Python 3's keywords (``V1Probe._exec``)
_PY2_KEYWORDS: Final = frozenset({"exec", "print"})
_MODEL_ATTRIBUTES: Final = frozenset({"openapi_types", "attribute_map", "discriminator"})


def snake(name: str) -> str:
    """The attribute name the OpenAPI generator gives a JSON field: ``hostIP`` -> ``host_ip``,
    ``nProcPerNode`` -> ``n_proc_per_node``, ``podIPs`` -> ``pod_i_ps``, ``exec`` -> ``_exec``."""
    step = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", name)
    attr = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", step).lower()
    return f"_{attr}" if keyword.iskeyword(attr) or attr in _PY2_KEYWORDS else attr


def camel(attr: str) -> str:
    """The JSON field of an attribute set on a view that the server did not send (``backoff_limit``)."""
    head, *rest = attr.lstrip("_").split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _is_time_field(key: str) -> bool:
    return key.endswith(("Time", "Timestamp")) or key in _TIME_FIELDS


_parse_time = parse_time


class KubeObject:
    """A Kubernetes object read by attribute, as the Kubeflow and kubernetes models are read.

    Attributes are the JSON fields in snake_case (``job.spec.run_policy.backoff_limit``); a field the server
    did not send reads as ``None``, as an unset model attribute does. Maps keyed by data (``labels``,
    ``pytorch_replica_specs``, ``replica_statuses``) are plain dicts whose values are views again; times are
    ``datetime``. Attributes can be set (``job.metadata.labels = {...}``) and the object passed back to
    ``update_job``/``create_job``. :meth:`to_dict` gives snake_case keys, like the models' ``to_dict``.
    """

    def __init__(self, wire: Mapping[str, Any]) -> None:
        keys: dict[str, str] = {}
        values: dict[str, Any] = {}
        originals: dict[str, str] = {}
        for key, value in wire.items():
            attr = snake(key)
            keys[attr] = key
            values[attr] = _view(key, value)
            if isinstance(value, str) and isinstance(values[attr], datetime.datetime):
                originals[attr] = value
        object.__setattr__(self, "_keys", keys)
        object.__setattr__(self, "_values", values)
        # The server's spelling of a time ("...Z"), sent back unchanged while the value is.
        object.__setattr__(self, "_originals", originals)

    def __getattr__(self, name: str) -> Any:
        values = self.__dict__.get("_values")
        # Private and dunder names are not fields (copy and pickle probe them); nor are the models' class
        # attributes, whose presence would make other code take a view for a model.
        if values is None or (name.startswith("_") and name not in values) or name in _MODEL_ATTRIBUTES:
            raise AttributeError(name)
        return values.get(name)

    def __setattr__(self, name: str, value: Any) -> None:
        self._keys.setdefault(name, camel(name))
        self._values[name] = value
        self._originals.pop(name, None)

    def __delattr__(self, name: str) -> None:
        self._keys.pop(name, None)
        self._values.pop(name, None)

    def __dir__(self) -> list[str]:
        return sorted({*super().__dir__(), *self._values})

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, KubeObject):
            return NotImplemented
        return self.to_dict() == other.to_dict()

    __hash__ = None  # type: ignore[assignment]  # mutable, like the models

    def __repr__(self) -> str:
        return pprint.pformat(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        """The object as a dict of snake_case attributes (maps keep their keys; times stay datetimes)."""
        return {attr: _to_dict(value) for attr, value in self._values.items()}

    def to_wire(self) -> dict[str, Any]:
        """The object as the API server reads it (camelCase fields; ``None`` attributes left out)."""
        out: dict[str, Any] = {}
        for attr, value in self._values.items():
            if value is None:
                continue
            original = self._originals.get(attr)
            if original is not None and _parse_time(original) == value:
                out[self._keys[attr]] = original
            else:
                out[self._keys[attr]] = serialize(value)
        return out


def _view(key: str, value: Any) -> Any:
    if isinstance(value, Mapping):
        if key in _MAP_FIELDS or key.endswith("ReplicaSpecs"):
            return {k: KubeObject(v) if isinstance(v, Mapping) else v for k, v in value.items()}
        return KubeObject(value)
    if isinstance(value, list):
        return [_view(key, item) for item in value]
    if isinstance(value, str) and _is_time_field(key):
        return _parse_time(value) or value
    return value


def _to_dict(value: Any) -> Any:
    if isinstance(value, KubeObject) or hasattr(value, "to_dict"):
        return value.to_dict()
    if isinstance(value, list):
        return [_to_dict(item) for item in value]
    if isinstance(value, dict):
        return {k: _to_dict(v) for k, v in value.items()}
    return value


def serialize(obj: Any) -> Any:
    """``obj`` as JSON-ready data, as ``kubernetes.client.ApiClient.sanitize_for_serialization`` makes it.

    Models (anything with ``openapi_types`` and ``attribute_map``: the Kubeflow SDK's and the kubernetes
    client's) become dicts keyed by their JSON names with ``None`` attributes left out; plain dicts keep
    their keys and their ``None`` values (JSON ``null``); datetimes and dates become ISO strings. kubedl-py's
    pydantic jobs give their ``to_dict()``, :class:`KubeObject` views their wire form."""
    if obj is None or isinstance(obj, _PRIMITIVES):
        return obj
    if isinstance(obj, list | tuple):
        return [serialize(item) for item in obj]
    if isinstance(obj, datetime.datetime | datetime.date):
        return obj.isoformat()
    if isinstance(obj, Mapping):
        return {key: serialize(value) for key, value in obj.items()}
    if isinstance(obj, KubeObject):
        return obj.to_wire()
    if isinstance(obj, TrainingJob):
        return obj.to_dict()
    if isinstance(obj, BaseModel):
        return obj.model_dump(by_alias=True, exclude_none=True, mode="json")
    types = getattr(obj, "openapi_types", None)
    names = getattr(obj, "attribute_map", None)
    if isinstance(types, Mapping) and isinstance(names, Mapping):
        fields = {names[attr]: getattr(obj, attr) for attr in types if getattr(obj, attr) is not None}
        return {key: serialize(value) for key, value in fields.items()}
    raise TypeError(f"cannot serialise {type(obj).__name__}: pass a Kubeflow or kubernetes model, a dict or a job")


def present(raw: Mapping[str, Any]) -> dict[str, Any]:
    """A job as the server sent it, in the Training Operator's layout (run policy under ``spec.runPolicy``,
    at least ``{}``: the Kubeflow models refuse a spec without it), whichever group it is in."""
    group = group_of(raw.get("apiVersion")) or KUBEDL
    body, _ = to_internal(raw, group)
    body = to_wire(body, KUBEFLOW)
    spec = body.get("spec")
    if isinstance(spec, Mapping):
        body["spec"] = {**spec, "runPolicy": dict(spec.get("runPolicy") or {})}
    return body


def in_group_layout(body: Mapping[str, Any], group: ApiGroup) -> dict[str, Any]:
    """A job body (perhaps in the Training Operator's layout, as :func:`present` gives it) in ``group``'s
    own: for training.kubedl.io the run policy goes back inline in ``spec``."""
    if group.run_policy_field is not None:
        return dict(body)
    internal, _ = to_internal(body, group)
    return internal


# ----------------------------------------------------------------------------------- the Kubeflow SDK


class _SdkState:
    """Whether the Kubeflow SDK is importable, found out once (its import reads the kubeconfig)."""

    tried: bool = False
    module: Any = None


_SDK = _SdkState()


def kubeflow_sdk() -> Any:
    """The ``kubeflow.training`` package when it imports, else ``None``.

    Any failure counts as "not installed": the package runs code at import (it reads the default
    kubeconfig, and the service account's namespace file when ``/var/run/secrets/kubernetes.io`` exists)
    and a script should get views rather than an import error from a package it never imported itself."""
    if not _SDK.tried:
        _SDK.tried = True
        before = set(sys.modules)
        try:
            _SDK.module = importlib.import_module("kubeflow.training")
        except Exception as exc:
            # A half-done import leaves submodules behind that a later import would not bind again.
            for name in set(sys.modules) - before:
                if name.startswith("kubeflow."):
                    del sys.modules[name]
            logger.debug("the Kubeflow training SDK is not usable (%s: %s): returning views", type(exc).__name__, exc)
            _SDK.module = None
    return _SDK.module


class _FakeResponse:
    """What the Kubeflow SDK's ``ApiClient.deserialize`` reads (its own ``utils.FakeResponse``)."""

    def __init__(self, obj: Any) -> None:
        self.data = json.dumps(obj)


class Objects:
    """Makes the objects a client returns: the Kubeflow SDK's models when it is installed, else views."""

    def __init__(self) -> None:
        self._api_client: Any = None

    @property
    def sdk(self) -> Any:
        return kubeflow_sdk()

    def _deserialize(self, obj: Mapping[str, Any], model: str) -> Any:
        sdk = self.sdk
        if sdk is None:
            return KubeObject(obj)
        if self._api_client is None:
            self._api_client = sdk.ApiClient()
        return self._api_client.deserialize(_FakeResponse(obj), model)

    def job(self, raw: Mapping[str, Any], model: str) -> Any:
        """A job from the server: the Kubeflow model ``model`` (``KubeflowOrgV1PyTorchJob``) or a view."""
        return self._deserialize(present(raw), model)

    def pod(self, raw: Mapping[str, Any]) -> Any:
        return self._deserialize(raw, "V1Pod")

    def event(self, raw: Mapping[str, Any]) -> Any:
        return self._deserialize(raw, "CoreV1Event")
