"""What the job commands print: ages, aligned tables, the rows of ``get`` and the text of ``describe``.

Pure functions of the SDK's views, so the output can be checked without a cluster.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final

from kubedl_py.api import constants as c
from kubedl_py.api.jobs import Job
from kubedl_py.api.plain import parse_time
from kubedl_py.sdk import JobDescription, event_time, job_age, job_state, replica_counts
from kubedl_py.sdk.views import failure_summary


def resource_name(job: Job) -> str:
    """``pytorchjob.training.kubedl.io``: how kubectl names the kind in its messages."""
    group = str(job.api_version).partition("/")[0] or c.GROUP
    return f"{str(job.kind).lower()}.{group}"


def kind_column(job: Job) -> str:
    """The KIND of a row: ``PyTorchJob``, and ``PyTorchJob.kubeflow.org`` for a job of the opt-in group (kubectl's
    ``kind.group``), so that jobs of one name in both groups are told apart."""
    group = job.api_group.group
    return job.kind if group == c.GROUP else f"{job.kind}.{group}"


def kind_option(job: Job) -> str:
    """What ``--kind`` (and the SDK's ``kind=``) takes to mean exactly this job's kind and group."""
    return f"{job.framework.plural}.{job.api_group.group}"


def rfc3339(value: datetime | str | None) -> str:
    """A time as Kubernetes prints it: UTC with ``Z``, to the second (``2026-01-02T03:04:05Z``), whatever form it
    came in (the server's ``Z`` strings, the models' datetimes with ``+00:00``)."""
    if value is None or value == "":
        return ""
    when = parse_time(value)
    if when is None:
        return str(value)
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def age(seconds: float | None) -> str:
    if seconds is None:
        return "<unknown>"
    s = int(seconds)
    if s < 120:
        return f"{s}s"
    if s < 7200:
        return f"{s // 60}m"
    if s < 172800:
        return f"{s // 3600}h"
    return f"{s // 86400}d"


def event_age(event: Mapping[str, Any]) -> str:
    at = parse_time(event_time(event))
    if at is None:
        return "<unknown>"
    return age((datetime.now(UTC) - at).total_seconds())


def table(rows: Sequence[Sequence[Any]], indent: str = "") -> str:
    cells = [[str(cell) for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]))]
    lines = ["   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip() for row in cells]
    return "".join(f"{indent}{line}\n" for line in lines)


class Columns:
    """Rows printed one at a time under a header, aligned like :func:`table` (``get -w``): a column widens
    when a later cell is longer, as ``kubectl get -w`` does."""

    def __init__(self, rows: Sequence[Sequence[Any]], minimum: Sequence[int] = ()) -> None:
        self.widths = [max(len(str(row[i])) for row in rows) for i in range(len(rows[0]))]
        least = [*minimum, *[0] * len(self.widths)][: len(self.widths)]
        self.widths = [max(width, floor) for width, floor in zip(self.widths, least, strict=True)]

    def line(self, row: Sequence[Any]) -> str:
        cells = [str(cell) for cell in row]
        self.widths = [max(width, len(cell)) for width, cell in zip(self.widths, cells, strict=True)]
        return "   ".join(cell.ljust(width) for cell, width in zip(cells, self.widths, strict=True)).rstrip() + "\n"


#: the least width of each column of ``get -w`` (common names, the longest kind and state): rows printed
#: one by one cannot be measured in advance, and a header as narrow as its words puts every row out of line
WATCH_WIDTHS: Final = (20, 12, 10, 8, 5, 7, 16)


def job_header(wide: bool) -> list[str]:
    header = ["NAME", "KIND", "STATE", "ACTIVE/SUCCEEDED/FAILED", "AGE"]  # the pods over all replica types
    if wide:
        header += ["NETWORK", "REASON", "MESSAGE"]
    return header


def job_row(job: Job, wide: bool) -> list[Any]:
    counts = "/".join(str(n) for n in replica_counts(job))
    row: list[Any] = [job.name, kind_column(job), job_state(job), counts, age(job_age(job))]
    if wide:
        last = next((cond for cond in reversed((job.status.conditions if job.status else None) or [])), None)
        row += [
            "host" if job.host_network else "pod",
            (last.reason if last else None) or "",
            (last.message if last else None) or "",
        ]
    return row


#: a line that only decorates (``=====``, ``-----``, ``*****``): torch's error footer is framed by them
_DECORATION = re.compile(r"^[\s=\-*_#~+.]*$")
#: a Python exception's last line (``RuntimeError: CUDA error: ...``, ``torch.OutOfMemoryError: ...``)
#: (torch's ``[rank1]:`` prefix allowed; torchrun's own ``ChildFailedError`` only wraps the rank's and is skipped)
_EXCEPTION = re.compile(r"^\s*(\[[\w\s]+\]:\s*)?[\w.]+(Error|Exception|Interrupt|Exit)\b.*")
#: the first line of torch.distributed.elastic's failure report, printed after the rank's own output
_TORCH_FOOTER = re.compile(r"^\S+ FAILED$")


def telling_line(message: str) -> str:
    """The line of a failed rank's last output that says what failed, for ``describe``'s Failed Attempts.

    The last line is often decoration: torchrun ends with its framed report (``train.py FAILED``, a ``Root
    Cause`` block, ``=====``). So: drop torchrun's report when it is there, then take the last Python exception
    line of the rank (``[rank1]: RuntimeError: CUDA error: ...``, ``ValueError: boom``) if any, else the last
    line that is not decoration."""
    lines = [line.rstrip() for line in message.strip().splitlines()]
    footer = next((i for i, line in enumerate(lines) if _TORCH_FOOTER.match(line.strip())), None)
    if footer is not None:
        # the report starts at the ===== line above "<script> FAILED"
        start = footer - 1 if footer > 0 and _DECORATION.match(lines[footer - 1]) else footer
        before = lines[:start]
        # nothing of the rank's own output kept (the message is its last 2 KiB): "train.py FAILED" says most
        lines = before if any(not _DECORATION.match(line) for line in before) else [lines[footer]]
    for line in reversed(lines):
        if _EXCEPTION.match(line) and "ChildFailedError" not in line:
            return line.strip()
    return next((line.strip() for line in reversed(lines) if not _DECORATION.match(line)), "")


def format_description(described: JobDescription) -> str:
    job = described.job
    status = job.status
    out = [
        f"Name:         {job.name}\n",
        f"Namespace:    {job.namespace}\n",
        f"Kind:         {kind_column(job)}\n",
        f"UID:          {job.metadata.uid or ''}\n",
        f"Network:      {'host' if job.host_network else 'pod'}\n",
        f"Created:      {rfc3339(job.metadata.creation_timestamp)} ({age(job_age(job))} ago)\n",
        f"State:        {job_state(job)}\n",
    ]
    if status and status.start_time:
        out.append(f"Start Time:   {rfc3339(status.start_time)}\n")
    if status and status.completion_time:
        out.append(f"Completed:    {rfc3339(status.completion_time)}\n")
    conditions = (status.conditions if status else None) or []
    out.append("Conditions:\n")
    if conditions:
        rows: list[list[Any]] = [["TYPE", "STATUS", "REASON", "LAST TRANSITION", "MESSAGE"]]
        for cond in conditions:
            when = rfc3339(cond.last_transition_time)
            rows.append([cond.type, cond.status, cond.reason or "", when, cond.message or ""])
        out.append(table(rows, "  "))
    else:
        out.append("  <none>\n")
    out.append("Replica Statuses:\n")
    replicas = (status.replica_statuses if status else None) or {}
    if replicas:
        # RESTARTS spend backoffLimit (the program's failures), INFRA RESTARTS infrastructureBackoffLimit.
        rows = [["TYPE", "ACTIVE", "SUCCEEDED", "FAILED", "RESTARTS", "INFRA RESTARTS", "LAST FAILURE"]]
        for kind, rs in replicas.items():
            last = rs.last_failure
            rows.append(
                [
                    kind,
                    rs.active or 0,
                    rs.succeeded or 0,
                    rs.failed or 0,
                    rs.restarts or 0,
                    rs.infrastructure_restarts or 0,
                    f"{last.index}: {failure_summary(last)}" if last is not None else "-",
                ]
            )
        out.append(table(rows, "  "))
    else:
        out.append("  <none>\n")
    failures = (status.failures if status else None) or []
    if failures:
        # The attempts that ended in a failure, oldest first (the status keeps the last 10).
        out.append("Failed Attempts:\n")
        rows = [["TIME", "REPLICA", "POD", "CLASS", "REASON", "EXIT", "NODE", "LAST LINE"]]
        for failure in failures:
            said = telling_line(failure.message or "")
            exit_code = "-" if failure.exit_code is None else failure.exit_code
            rows.append(
                [
                    failure.time.strftime("%Y-%m-%dT%H:%M:%SZ") if failure.time else "",
                    f"{failure.replica_type} {failure.index}",
                    failure.pod or "-",
                    failure.failure_class,
                    failure.reason,
                    exit_code,
                    failure.node or "-",
                    said[:80] or "-",
                ]
            )
        out.append(table(rows, "  "))
    avoided = (status.avoided_nodes if status else None) or []
    if avoided:
        out.append("Avoided Nodes:\n")
        out.append(table([["NODE", "REASON"], *([entry.node, entry.reason] for entry in avoided)], "  "))
    out.append("Pods:\n")
    if described.pods:
        rows = [["NAME", "NODE", "PHASE", "RESTARTS", "HOST PORT", "SERVICE", "TARGET PORT"]]
        for pod in described.pods:
            host_port = pod.host_port if pod.host_port is not None else ("-" if not job.host_network else "?")
            target = pod.target_port if pod.target_port is not None else "-"
            rows.append([pod.name, pod.node or "-", pod.phase, pod.restarts, host_port, pod.service or "-", target])
        out.append(table(rows, "  "))
    else:
        out.append("  <none>\n")
    if described.devices or described.devices_unreadable:
        # what kube-scheduler allocated each pod's DRA claims, and what the driver reported
        out.append("Devices:\n")
        if described.devices_unreadable:
            out.append(f"  {described.devices_unreadable}\n")
        if described.devices:
            rows = [["POD", "REQUEST", "DEVICE", "DRIVER", "READY", "INTERFACE"]]
            for d in described.devices:
                ready = "-" if d.ready is None else ("True" if d.ready else "False")
                rows.append([d.pod, d.request, f"{d.pool}/{d.device}", d.driver, ready, d.interface or "-"])
            out.append(table(rows, "  "))
    out.append("Events:\n")
    if described.events:
        rows = [["AGE", "TYPE", "REASON", "OBJECT", "COUNT", "MESSAGE"]]
        for event in described.events:
            involved = event.get("involvedObject") or {}
            rows.append(
                [
                    event_age(event),
                    event.get("type", ""),
                    event.get("reason", ""),
                    f"{str(involved.get('kind', '')).lower()}/{involved.get('name', '')}",
                    event.get("count", 1),
                    str(event.get("message", "")).strip(),
                ]
            )
        out.append(table(rows, "  "))
    else:
        out.append("  <none>\n")
    return "".join(out)
