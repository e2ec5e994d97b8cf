"""The events ``get_job_logs(verbose=True)`` returns, grouped as the Kubeflow training SDK groups them.

Why apart: it is a pure function of the job, its pods and the namespace's events (``utils.add_event_to_dict``
in the Kubeflow SDK), tested without a cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kubedl_py.api.plain import parse_time
from kubedl_py.sdk.kubeflow import constants

__all__ = ["events_by_subject"]


_time = parse_time


def events_by_subject(
    job: Mapping[str, Any], pods: Iterable[Mapping[str, Any]], events: Iterable[Mapping[str, Any]]
) -> dict[str, list[str]]:
    """``{"pytorchjob/<job>": [...], "pod/<pod>": [...]}``: the events about the job and each pod created
    since that object was, each ``"<YYYY-mm-dd HH:MM:SS> <message>"``, in the order listed."""
    subjects = [(str(job.get("kind")), job["metadata"]["name"], _time(job["metadata"].get("creationTimestamp")))]
    subjects += [
        (constants.POD_KIND, pod["metadata"]["name"], _time(pod["metadata"].get("creationTimestamp"))) for pod in pods
    ]
    grouped: dict[str, list[str]] = {}
    for event in events:
        involved = event.get("involvedObject") or {}
        created = _time((event.get("metadata") or {}).get("creationTimestamp"))
        for kind, name, since in subjects:
            if involved.get("kind") != kind or involved.get("name") != name or created is None:
                continue
            if since is not None and created < since:
                continue
            line = f"{created.strftime('%Y-%m-%d %H:%M:%S')} {event.get('message', '')}"
            grouped.setdefault(f"{kind.lower()}/{name}", []).append(line)
    return grouped
