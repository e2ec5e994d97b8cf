"""The asyncio half of the Kubeflow-compatible client: one connection pool, which group serves a kind, and
the calls that need more than one request (waiting on a watch, following logs).

Why apart from :mod:`.client`: everything here runs on the client's private event loop
(:class:`~kubedl_py.sdk.kubeflow.runner.LoopThread`); the blocking client only hands coroutines over and
turns results and errors into what the Kubeflow SDK returns and raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
from collections.abc import Mapping, Sequence
from typing import Any

from kubedl_py.api.groups import KUBEDL, KUBEFLOW, ApiGroup
from kubedl_py.kube import errors as kerrors
from kubedl_py.kube.client import ClientSettings
from kubedl_py.kube.resources import Resource
from kubedl_py.sdk.config import LazyKube, ResolvedConfig
from kubedl_py.sdk.kubeflow import constants
from kubedl_py.sdk.pods import container_of
from kubedl_py.sdk.watching import list_watch

__all__ = ["Connection", "PodLogError", "WatchItem", "async_configuration", "job_resource"]

logger = logging.getLogger(__name__)

#: what :meth:`Connection.watch_job` puts on its queue: ("job", object), ("gone", None) or ("error", exception)
WatchItem = tuple[str, Any]


def job_resource(kind: str, group: ApiGroup) -> Resource:
    return Resource(group.group, group.version, constants.JOB_PARAMETERS[kind]["plural"], kind)


def async_configuration(configuration: Any) -> Any:
    """A kubernetes-asyncio ``Configuration`` for the one given (the Kubeflow SDK takes the sync client's)."""
    from kubernetes_asyncio.client import Configuration

    if isinstance(configuration, Configuration):
        return configuration
    converted = Configuration(host=configuration.host)
    for attr in (
        "api_key",
        "api_key_prefix",
        "username",
        "password",
        "ssl_ca_cert",
        "cert_file",
        "key_file",
        "verify_ssl",
        "assert_hostname",
        "tls_server_name",
        "proxy",
        "proxy_headers",
    ):
        if hasattr(configuration, attr) and hasattr(converted, attr):
            setattr(converted, attr, getattr(configuration, attr))
    return converted


class Connection(LazyKube):
    """A lazily opened :class:`KubeClient` and the answers of API discovery, on the client's loop."""

    def __init__(self, config: ResolvedConfig, configuration: Any, settings: ClientSettings) -> None:
        super().__init__(config, configuration, settings)
        #: the resources kubeflow.org/v1 serves (asked once per client)
        self._kubeflow_serves: set[str] | None = None

    async def group(self, kind: str, fixed: ApiGroup | None) -> ApiGroup:
        """The group to talk to about ``kind``: ``fixed`` when the client was given one, else kubeflow.org
        when the cluster serves the kind there (discovery), else training.kubedl.io."""
        if fixed is not None:
            return fixed
        if self._kubeflow_serves is None:
            kube = await self.kube()
            try:
                found = await kube.request("GET", f"/apis/{KUBEFLOW.group}/{KUBEFLOW.version}")
            except kerrors.NotFound:
                found = {}
            resources = found.get("resources") or []
            self._kubeflow_serves = {str(r.get("name")) for r in resources if isinstance(r, Mapping)}
        return KUBEFLOW if constants.JOB_PARAMETERS[kind]["plural"] in self._kubeflow_serves else KUBEDL

    async def resource(self, kind: str, fixed: ApiGroup | None) -> Resource:
        return job_resource(kind, await self.group(kind, fixed))

    async def queue_exists(self, queue_name: str, namespace: str) -> bool | None:
        """Whether Kueue's LocalQueue ``queue_name`` exists: True, False (404, warned), None (unknown, warned);
        a 5xx is Kueue's webhook not answering (``ConnectionError``), as the Kubeflow SDK says."""
        kube = await self.kube()
        path = f"/apis/kueue.x-k8s.io/v1beta1/namespaces/{namespace}/localqueues/{queue_name}"
        try:
            await kube.request("GET", path)
            return True
        except kerrors.NotFound:
            logger.warning(
                "Queue '%s' does not exist in namespace '%s'. The job will be created but may not be managed by Kueue.",
                queue_name,
                namespace,
            )
            return False
        except kerrors.ServerError as exc:
            raise ConnectionError("Kueue webhook or admission controller is not responding.") from exc
        except kerrors.KubeError as exc:
            logger.warning(
                "Failed to validate Kueue queue '%s': %s. The job will be created but may not be managed by Kueue.",
                queue_name,
                exc,
            )
            return None

    # ------------------------------------------------------------------------------------ waiting

    async def watch_job(self, resource: Resource, name: str, namespace: str, out: queue.Queue[WatchItem]) -> None:
        """Put every state of the job on ``out`` as it changes, until cancelled (list, then watch)."""
        try:
            events = list_watch(
                await self.kube(), resource, namespace, self.settings.retry, field_selector=f"metadata.name={name}"
            )
            async with contextlib.aclosing(events):
                async for event in events:
                    if event.type == "SYNC":
                        items = event.object["items"]
                        out.put(("job", items[0]) if items else ("gone", None))
                    elif event.type == "DELETED":
                        out.put(("gone", None))
                    else:
                        out.put(("job", event.object))
        except Exception as exc:
            out.put(("error", exc))

    # -------------------------------------------------------------------------------------- logs

    async def read_logs(self, pods: Sequence[Mapping[str, Any]], namespace: str, container: str) -> dict[str, str]:
        """The log of each pod so far; a pod whose log cannot be read raises naming it."""
        kube = await self.kube()
        logs: dict[str, str] = {}
        for pod in pods:
            name = str(pod["metadata"]["name"])
            try:
                logs[name] = await kube.read_log(name, namespace=namespace, container=container_of(pod, container))
            except kerrors.KubeError as exc:
                raise PodLogError(namespace, name, exc) from exc
        return logs

    async def follow_logs(self, pods: Sequence[Mapping[str, Any]], namespace: str, container: str) -> dict[str, str]:
        """Every pod's log, printed line by line as ``[Pod <name>]: <line>`` while it is written, until each
        pod's container has ended; returns the logs as :meth:`read_logs` does."""
        kube = await self.kube()
        logs: dict[str, list[str]] = {}

        async def one(pod: Mapping[str, Any]) -> None:
            name = str(pod["metadata"]["name"])
            lines = logs.setdefault(name, [])
            try:
                stream = kube.stream_log(name, namespace=namespace, container=container_of(pod, container))
                async with contextlib.aclosing(stream):
                    async for line in stream:
                        print(f"[Pod {name}]: {line}")
                        lines.append(line)
            except kerrors.KubeError as exc:
                raise PodLogError(namespace, name, exc) from exc

        await asyncio.gather(*(one(pod) for pod in pods))
        return {name: "".join(f"{line}\n" for line in lines) for name, lines in logs.items()}


class PodLogError(Exception):
    """A pod's log could not be read (the client reports it as the Kubeflow SDK does)."""

    def __init__(self, namespace: str, pod: str, cause: BaseException) -> None:
        super().__init__(f"Failed to read logs for pod {namespace}/{pod}. Error: {cause}")
