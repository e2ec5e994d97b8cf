"""The job commands -- ``submit``, ``get``, ``describe``, ``logs``, ``wait``, ``delete`` -- over the SDK.

Why they are thin: every one is an :class:`~kubedl_py.sdk.AsyncTrainingClient` call plus printing, so the
CLI and the SDK cannot drift apart. :func:`with_client` is the one place where the SDK's errors become one
line on stderr and the exit codes scripts rely on (see :mod:`kubedl_py.cli.errors`).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final

import yaml

from kubedl_py.api import JobValidationError, load_jobs, load_jobs_file
from kubedl_py.api.jobs import Job
from kubedl_py.cli.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_TIMEOUT, EXIT_USAGE, UsageError, fail
from kubedl_py.cli.output import (
    WATCH_WIDTHS,
    Columns,
    format_description,
    job_header,
    job_row,
    kind_option,
    resource_name,
)
from kubedl_py.kube.client import ClientSettings
from kubedl_py.kube.retry import RetrySettings
from kubedl_py.sdk import (
    AmbiguousJobError,
    AsyncTrainingClient,
    ConfigurationError,
    InvalidJobError,
    JobFailedError,
    JobProgress,
    JobTimeoutError,
    TrainingError,
    job_state,
)
from kubedl_py.sdk.config import resolve_config
from kubedl_py.sdk.watching import conditions_wanted

Body = Callable[[AsyncTrainingClient], Awaitable[int]]

#: A refused connection means no cluster runs at that address: say so at once instead of retrying (an API
#: server that answers with 5xx or drops connections is still retried).
CLI_SETTINGS: Final = ClientSettings(retry=RetrySettings(retry_refused=False))


def with_client(args: argparse.Namespace, body: Body) -> int:
    """Run ``body(client)`` on an AsyncTrainingClient; turn the SDK's errors into one line and an exit code."""

    async def run() -> int:
        async with AsyncTrainingClient(args.kubeconfig, args.context, args.namespace, settings=CLI_SETTINGS) as client:
            return await body(client)

    debug = bool(args.debug)
    try:
        # Resolved here first so that what to do is said in flags (--kubeconfig), not the SDK's arguments.
        resolve_config(args.kubeconfig, args.context, args.namespace, command_line=True)
        return asyncio.run(run())
    except JobValidationError as exc:
        details = "; ".join(str(error) for error in exc.errors)
        return fail(f"invalid {exc.subject}: {details}", EXIT_USAGE, debug)
    except JobFailedError as exc:
        return fail(str(exc), EXIT_FAILED, debug)
    except JobTimeoutError as exc:
        return fail(str(exc), EXIT_TIMEOUT, debug)
    except (InvalidJobError, ConfigurationError, AmbiguousJobError) as exc:
        return fail(str(exc), EXIT_USAGE, debug)
    except TrainingError as exc:
        return fail(str(exc), EXIT_FAILED, debug)
    except ValueError as exc:
        return fail(str(exc), EXIT_USAGE, debug)


def _read_jobs(path: str) -> list[Job]:
    if path == "-":
        return list(load_jobs(sys.stdin.read(), source="<stdin>"))
    return list(load_jobs_file(path))


def _read_jobs_or_fail(args: argparse.Namespace) -> list[Job] | int:
    """The jobs of the file, validated before any cluster is contacted (a bad file is exit 2 even offline)."""
    try:
        return _read_jobs(args.file)
    except JobValidationError as exc:
        details = "; ".join(str(error) for error in exc.errors)
        return fail(f"invalid {exc.subject}: {details}", EXIT_USAGE, bool(args.debug))


def _namespace_mismatch(jobs: Sequence[Job], namespace: str | None) -> str | None:
    """As kubectl: a document naming another namespace than ``-n`` is refused, not silently sent elsewhere."""
    if not namespace:
        return None
    for job in jobs:
        own = job.metadata.namespace
        if own and own != namespace:
            return (
                f'{job.kind} "{job.name}" is in namespace "{own}" but -n says "{namespace}": '
                f"pass -n {own}, or drop metadata.namespace from the file"
            )
    return None


def run_submit(args: argparse.Namespace) -> int:
    jobs = _read_jobs_or_fail(args)
    if isinstance(jobs, int):
        return jobs
    mismatch = _namespace_mismatch(jobs, args.namespace)
    if mismatch:
        return fail(mismatch, EXIT_USAGE, False)

    created: list[Job] = []

    async def body(client: AsyncTrainingClient) -> int:
        # A document's own namespace wins (it equals -n, if given); -n (else the context's) fills the gaps.
        for job in jobs:
            created.append(await client.submit(job, namespace=job.metadata.namespace or args.namespace))
            print(f"{resource_name(created[-1])}/{created[-1].name} created", flush=True)
        if not (args.wait or args.follow):
            return 0
        # --timeout bounds each job's wait in turn (the jobs run meanwhile: a later one may be done already).
        for job in created:
            if args.follow:
                await _follow_then_wait(client, job, args.timeout)
            else:
                await _wait_with_progress(
                    client, job.name, kind_option(job), ["Succeeded"], args.timeout, namespace=job.namespace
                )
            print(f"{resource_name(job)}/{job.name} succeeded", flush=True)
        return 0

    try:
        return with_client(args, body)
    except KeyboardInterrupt:
        if created:
            # Ctrl-C stops the waiting, not the jobs: say so, and how to stop them.
            names = " ".join(job.name for job in created)
            print(
                f"kubedl-py: interrupted; stopped waiting, the job{'s' if len(created) > 1 else ''} "
                f"{names} keep{'' if len(created) > 1 else 's'} running (`kubedl-py delete NAME` stops one)",
                file=sys.stderr,
            )
        return EXIT_INTERRUPTED


async def _follow_then_wait(client: AsyncTrainingClient, job: Job, seconds: float | None) -> None:
    started = time.monotonic()

    async def follow() -> None:
        async for line in client.stream_logs(job.name, kind=kind_option(job), follow=True, namespace=job.namespace):
            print(line, flush=True)

    try:
        await asyncio.wait_for(follow(), seconds)
    except TimeoutError:
        last = await client.get(job.name, kind_option(job), namespace=job.namespace)
        # what held it up, as `wait` says it: the scheduler's (or the kubelet's) words for a Pending pod
        stuck = await client.why_pending(job.name, job.namespace or "default", last.metadata.uid)
        raise JobTimeoutError(
            f"timed out after {seconds:g}s following {job.namespace}/{job.name}; last state {job_state(last)}{stuck}",
            last,
            job_state(last),
        ) from None
    remaining = None if seconds is None else max(seconds - (time.monotonic() - started), 0.1)
    await client.wait(job.name, kind=kind_option(job), timeout=remaining, namespace=job.namespace)


async def _wait_with_progress(
    client: AsyncTrainingClient,
    name: str,
    kind: str | None,
    until: list[str],
    seconds: float | None,
    *,
    namespace: str | None = None,
) -> Job:
    """``client.wait`` with a live progress line on stderr when it is a terminal."""
    live = sys.stderr.isatty()
    latest: list[JobProgress] = []

    def show(progress: JobProgress) -> None:
        latest[:] = [progress]
        if live:
            sys.stderr.write(f"\r\033[K{progress}")
            sys.stderr.flush()

    async def tick() -> None:
        begun = time.monotonic()
        while True:
            await asyncio.sleep(1.0)
            if latest:
                progress = latest[0]
                elapsed = time.monotonic() - begun
                text = str(progress).rsplit("  ", 1)[0]
                sys.stderr.write(f"\r\033[K{text}  {elapsed:.0f}s")
                sys.stderr.flush()

    ticker = asyncio.create_task(tick()) if live else None
    try:
        return await client.wait(name, until, kind=kind, timeout=seconds, namespace=namespace, on_progress=show)
    finally:
        if ticker is not None:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
        if live and latest:
            sys.stderr.write("\n")
            sys.stderr.flush()


def run_get(args: argparse.Namespace) -> int:
    if args.watch and args.output in ("json", "yaml"):
        raise UsageError(f"-w prints table rows; it does not combine with -o {args.output}")

    async def body(client: AsyncTrainingClient) -> int:
        if args.name:
            jobs = [await client.get(args.name, args.kind)]
        else:
            jobs = await client.list(args.kind, args.selector)
        if args.output in ("json", "yaml"):
            dicts = [job.to_dict() for job in jobs]
            doc: Any = dicts[0] if args.name else {"apiVersion": "v1", "kind": "List", "items": dicts}
            if args.output == "json":
                sys.stdout.write(json.dumps(doc, indent=2) + "\n")
            else:
                sys.stdout.write(yaml.safe_dump(doc, sort_keys=False))
            return 0
        wide = args.output == "wide"
        rows = [job_header(wide), *(job_row(job, wide) for job in jobs)]
        # With -w the table is laid out as the rows that follow it will be (they cannot be measured ahead).
        columns = Columns(rows, WATCH_WIDTHS if args.watch else ())
        if not jobs:
            print(f"No jobs found in namespace {client.namespace}.", file=sys.stderr, flush=True)
            if not args.watch:
                return 0
        else:
            sys.stdout.write("".join(columns.line(row) for row in rows))
            sys.stdout.flush()
        if args.watch:
            await _watch_rows(client, args, jobs, columns, header_printed=bool(jobs))
        return 0

    return with_client(args, body)


async def _watch_rows(
    client: AsyncTrainingClient, args: argparse.Namespace, shown: list[Job], columns: Columns, *, header_printed: bool
) -> None:
    """``get -w``: a row per change after the table, until Ctrl-C (which ends the command with 130)."""
    wide = args.output == "wide"
    # The watch starts with the jobs as they are: skip those the table already showed as they are.
    printed = {(job.kind, job.name, job.metadata.resource_version) for job in shown}
    async for event in client.watch(args.kind, args.selector, name=args.name or None):
        job = event.job
        key = (job.kind, job.name, job.metadata.resource_version)
        if event.type == "ADDED" and key in printed:
            continue
        printed.discard(key)
        if not header_printed:
            sys.stdout.write(columns.line(job_header(wide)))
            header_printed = True
        sys.stdout.write(columns.line(job_row(job, wide)))
        sys.stdout.flush()


def run_describe(args: argparse.Namespace) -> int:
    async def body(client: AsyncTrainingClient) -> int:
        sys.stdout.write(format_description(await client.describe(args.name, args.kind)))
        return 0

    return with_client(args, body)


def run_logs(args: argparse.Namespace) -> int:
    if args.previous:
        if args.follow:
            raise UsageError("--previous prints runs that have ended; it does not combine with -f")
        return with_client(args, lambda client: _previous_logs(client, args))

    async def body(client: AsyncTrainingClient) -> int:
        index = args.index if args.index is not None or args.replica is None else 0
        async for line in client.stream_logs(
            args.name, args.replica, index, kind=args.kind, follow=args.follow, container=args.container
        ):
            print(line.text if args.replica is not None else line, flush=True)
        return 0

    return with_client(args, body)


async def _previous_logs(client: AsyncTrainingClient, args: argparse.Namespace) -> int:
    """``logs --previous``: per rank a header saying which run failed and why, then its last lines."""
    index = args.index if args.index is not None or args.replica is None else 0
    attempts = await client.previous_logs(args.name, args.replica, index, kind=args.kind, container=args.container)
    if not attempts:
        which = f" of {args.replica} {index}" if args.replica is not None else ""
        return fail(
            f'job "{args.name}" has no failed run{which} to show: none is recorded in its status and no container '
            "restarted in place",
            EXIT_FAILED,
            False,
        )
    for attempt in attempts:
        print(f"==> {attempt.summary()} <==", flush=True)
        text = attempt.text.rstrip("\n")
        if text:
            print(text, flush=True)
        elif attempt.source == "status":
            print("(no termination message was kept: the container's terminationMessagePolicy is File)", flush=True)
    return 0


def run_wait(args: argparse.Namespace) -> int:
    try:
        (condition,) = conditions_wanted(str(args.condition).split("=", 1)[-1])  # "running" -> "Running"
    except ValueError as exc:
        return fail(str(exc), EXIT_USAGE, bool(args.debug))

    async def body(client: AsyncTrainingClient) -> int:
        job = await _wait_with_progress(client, args.name, args.kind, [condition], args.timeout)
        print(f"{resource_name(job)}/{job.name} condition met ({condition})", flush=True)
        return 0

    return with_client(args, body)


def run_delete(args: argparse.Namespace) -> int:
    """Delete each named job in turn, as kubectl does: one that cannot be deleted is said and the others are
    still deleted; the exit code is that of the last failure (0 when all went)."""
    names: list[str] = list(args.name) if isinstance(args.name, list) else [args.name]
    code = 0
    for name in names:

        async def body(client: AsyncTrainingClient, name: str = name) -> int:
            job = await client.delete(name, args.kind, wait=args.wait, timeout=args.timeout)
            print(f'{resource_name(job)} "{job.name}" deleted', flush=True)
            return 0

        code = with_client(args, body) or code
    return code
