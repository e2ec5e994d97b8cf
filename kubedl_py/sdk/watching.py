"""What the SDK waits on: the shared list/watch loop with the SDK's patience and errors, and when a wait is over.

Why: ``wait``, ``delete(wait=True)`` and ``logs(follow=True)`` all react to a watch, never poll. The loop
itself (410 re-list, backoff, bookmarks, watches that end at once) is :class:`kubedl_py.kube.listwatch.ListWatch`,
shared with the controller's informers; what is the SDK's own is that it gives up -- after the client's
``ClientSettings.retry`` attempts or deadline -- instead of retrying for ever, that a refusal other than a
5xx, a 429 or no answer (a 403, a 404) is raised at once, and that every error coming out is one of the
SDK's (:class:`~kubedl_py.sdk.errors.ClusterError` and subclasses), never the machinery's.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncGenerator, Iterable
from typing import Final

from kubedl_py.api.jobs import Job
from kubedl_py.kube import errors as kerrors
from kubedl_py.kube.client import KubeClient, WatchEvent
from kubedl_py.kube.listwatch import Listed, ListWatch, ListWatchSettings, WatchError
from kubedl_py.kube.resources import Resource
from kubedl_py.kube.retry import RetrySettings, is_retryable
from kubedl_py.sdk.errors import JobEndedError, JobFailedError, translate
from kubedl_py.sdk.views import CONDITION_TYPES, true_condition

logger = logging.getLogger(__name__)

#: a watch that ends sooner than this without a single event failed (back off); one that lasted longer
#: ended normally (resume at once). The Informer's ``min_watch_duration``.
MIN_WATCH_DURATION: Final = 1.0


async def list_watch(
    kube: KubeClient,
    resource: Resource,
    namespace: str,
    retry: RetrySettings,
    *,
    field_selector: str | None = None,
    label_selector: str | None = None,
) -> AsyncGenerator[WatchEvent, None]:
    """List, then watch from the list's resourceVersion, for ever: a ``SYNC`` event carries every listed
    object (``object["items"]``), then the watch's events follow (see :mod:`kubedl_py.kube.listwatch`).

    A failing watch is retried with the backoff of ``retry`` and given up after its ``attempts`` failures in
    a row or its ``deadline``; only retryable failures (:func:`kubedl_py.kube.retry.is_retryable`) are
    retried. A failed list is not retried here: the client already did."""
    what = f"watch of {resource} in {namespace}"

    def backing_off(failure: BaseException, delay: float, failures: int) -> None:
        logger.info("%s failed (%s); retrying in %.2fs (failure %d)", what, failure, delay, failures)

    loop = ListWatch(
        kube,
        resource,
        namespace=namespace,
        field_selector=field_selector,
        label_selector=label_selector,
        settings=ListWatchSettings(
            min_watch_duration=MIN_WATCH_DURATION, backoff=retry, give_up=True, retry_list=False
        ),
        retry=lambda exc: is_retryable(exc, retry),
        on_backoff=backing_off,
    )
    try:
        async with contextlib.aclosing(loop.events()) as events:
            async for event in events:
                if isinstance(event, Listed):
                    yield WatchEvent("SYNC", {"items": event.items})
                else:
                    yield event
    except WatchError as exc:
        cause = exc.cause
        if not isinstance(cause, kerrors.KubeError):
            raise cause from None
        context = f"{what} failed {exc.failures} times in a row" if exc.failures else what
        raise translate(cause, context) from cause
    except kerrors.KubeError as exc:  # the list
        raise translate(exc) from exc


def conditions_wanted(until: Iterable[str]) -> set[str]:
    if isinstance(until, str):
        until = [until]
    by_lower = {t.lower(): t for t in CONDITION_TYPES}
    wanted = set()
    for cond in until:
        canonical = by_lower.get(cond.lower())
        if canonical is None:
            raise ValueError(f"unknown condition {cond!r}: use one of {', '.join(CONDITION_TYPES)}")
        wanted.add(canonical)
    if not wanted:
        raise ValueError("wait needs at least one condition")
    return wanted


def settled(job: Job, wanted: set[str]) -> Job | None:
    """The job when the wait is over, ``None`` to keep waiting; raises when it ended otherwise than asked.

    A job that succeeded satisfies a wait for ``Created``/``Running``/``Restarting`` (it went through them),
    but not a wait for ``Failed``: that raises :class:`JobEndedError` saying what happened."""
    if any(true_condition(job, kind) for kind in wanted):
        return job
    failed = true_condition(job, "Failed")
    if failed is not None:
        raise JobFailedError(failed.reason or "Failed", failed.message or "", job)
    succeeded = true_condition(job, "Succeeded")
    if succeeded is not None:
        if "Failed" in wanted:
            raise JobEndedError(
                f"{job.kind} {job.namespace}/{job.name} succeeded ({succeeded.message or succeeded.reason}); "
                "it will not become Failed",
                job,
                "Succeeded",
            )
        return job
    return None
