"""Request accounting and fault injection for reliability tests.

Tests read what clients did (:class:`RequestLog`: every request with verb, resource, status, latency, and
counters by verb and resource) and make the API server misbehave on purpose (:class:`Faults`): answer
matching requests with an error status (500, 429 with Retry-After, 409, ...) with a probability or for the
next N matches, cut watch streams after some seconds, or force 410 Gone when a watch resumes.
"""

from __future__ import annotations

import random
import re
import threading
import time
from collections import Counter, deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class RequestInfo:
    """What a request is, in the API server's terms."""

    method: str
    path: str
    verb: str  # get list watch create update patch delete deletecollection (or "" for non-resource paths)
    group: str = ""
    resource: str = ""
    subresource: str = ""
    namespace: str = ""
    name: str = ""


def verb_of(method: str, *, named: bool, query: Mapping[str, str]) -> str:
    """The API server's verb for a request of a resource (the names RBAC and the request log use); shared
    by the embedded server and the fault proxy in front of a real one, so both logs read the same."""
    if method in ("GET", "HEAD"):
        if not named:
            return "watch" if query.get("watch") in ("1", "true", "True") else "list"
        return "get"
    if method == "DELETE":
        return "delete" if named else "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch"}.get(method, method.lower())


@dataclass
class RequestRecord:
    method: str
    path: str
    query: str
    verb: str
    resource: str
    subresource: str
    namespace: str
    name: str
    status: int
    latency: float
    started: float
    user_agent: str = ""

    @classmethod
    def of(cls, info: RequestInfo, *, query: str, status: int, started: float, user_agent: str) -> RequestRecord:
        """The record of a request that ``info`` classified, answered ``status``, begun at ``started``
        (``time.monotonic()``)."""
        return cls(
            info.method,
            info.path,
            query,
            info.verb,
            info.resource,
            info.subresource,
            info.namespace,
            info.name,
            status,
            time.monotonic() - started,
            started,
            user_agent,
        )


class RequestLog:
    """The last ``maxlen`` requests plus counters since start (or since :meth:`clear`).

    Thread-safe: the fault proxy of a session-long real cluster writes from its own thread while tests read
    from theirs, so readers get snapshots (``records`` is a copy)."""

    def __init__(self, maxlen: int = 100_000) -> None:
        self._records: deque[RequestRecord] = deque(maxlen=maxlen)
        self._counts: Counter[tuple[str, str]] = Counter()  # (verb, resource) -> n
        self._status_counts: Counter[int] = Counter()
        self._lock = threading.Lock()

    @property
    def records(self) -> list[RequestRecord]:
        with self._lock:
            return list(self._records)

    @property
    def counts(self) -> Counter[tuple[str, str]]:
        with self._lock:
            return Counter(self._counts)

    @property
    def status_counts(self) -> Counter[int]:
        with self._lock:
            return Counter(self._status_counts)

    def add(self, rec: RequestRecord) -> None:
        key = rec.resource + (f"/{rec.subresource}" if rec.subresource else "")
        with self._lock:
            self._records.append(rec)
            self._counts[(rec.verb, key)] += 1
            self._status_counts[rec.status] += 1

    def count(self, verb: str | None = None, resource: str | None = None) -> int:
        """Requests so far, optionally only of one verb and/or resource (``pods``, ``pods/status``)."""
        return sum(
            n
            for (v, r), n in self.counts.items()
            if (verb is None or v == verb) and (resource is None or r == resource)
        )

    def find(
        self, verb: str | None = None, resource: str | None = None, status: int | None = None
    ) -> list[RequestRecord]:
        return [
            r
            for r in self.records
            if (verb is None or r.verb == verb)
            and (resource is None or r.resource == resource)
            and (status is None or r.status == status)
        ]

    def clear(self) -> None:
        with self._lock:
            self._records.clear()
            self._counts.clear()
            self._status_counts.clear()


@dataclass
class FaultRule:
    """Requests matching every given field get ``status`` instead of being served.

    ``times``: only the next N matches (None: unlimited). ``probability``: chance per match.
    ``action``: "status" (answer with an error), "cut-watch" (end matching watch streams after
    ``after_seconds``) or "expire-watch" (a watch that resumes from a resourceVersion gets 410 Gone).
    """

    verb: str | None = None
    resource: str | None = None
    subresource: str | None = None
    namespace: str | None = None
    name: str | None = None
    path: str | None = None  # regular expression searched in the URL path
    method: str | None = None
    status: int = 500
    message: str | None = None
    #: the Status's reason (default: the code's usual one), e.g. "AlreadyExists" for a 409 on a create
    reason: str | None = None
    retry_after: int | None = None
    probability: float = 1.0
    times: int | None = None
    action: str = "status"
    after_seconds: float = 0.0
    hits: int = field(default=0, init=False)

    def matches(self, info: RequestInfo) -> bool:
        if self.verb is not None and self.verb != info.verb:
            return False
        if self.resource is not None and self.resource != info.resource:
            return False
        if self.subresource is not None and self.subresource != info.subresource:
            return False
        if self.namespace is not None and self.namespace != info.namespace:
            return False
        if self.name is not None and self.name != info.name:
            return False
        if self.method is not None and self.method.upper() != info.method:
            return False
        return not (self.path is not None and not re.search(self.path, info.path))

    @property
    def exhausted(self) -> bool:
        return self.times is not None and self.hits >= self.times


class Faults:
    """The active fault rules. Rules apply in order added; the first that fires wins."""

    def __init__(self, seed: int | None = None) -> None:
        self.rules: list[FaultRule] = []
        self._rng = random.Random(seed)

    def add(self, rule: FaultRule) -> FaultRule:
        self.rules.append(rule)
        return rule

    def fail(
        self,
        status: int = 500,
        *,
        verb: str | None = None,
        resource: str | None = None,
        times: int | None = None,
        probability: float = 1.0,
        retry_after: int | None = None,
        **match: Any,
    ) -> FaultRule:
        """Answer matching requests with ``status`` (429 gets ``Retry-After``)."""
        if status == 429 and retry_after is None:
            retry_after = 1
        return self.add(
            FaultRule(
                verb=verb,
                resource=resource,
                status=status,
                times=times,
                probability=probability,
                retry_after=retry_after,
                **match,
            )
        )

    def cut_watches(
        self, after_seconds: float, *, resource: str | None = None, times: int | None = None, **match: Any
    ) -> FaultRule:
        """End matching watch streams ``after_seconds`` after they start (as a dropped connection)."""
        return self.add(
            FaultRule(
                verb="watch", resource=resource, action="cut-watch", after_seconds=after_seconds, times=times, **match
            )
        )

    def expire_watches(self, *, resource: str | None = None, times: int | None = 1, **match: Any) -> FaultRule:
        """Watches that resume from a resourceVersion get an ERROR 410 Expired event."""
        return self.add(FaultRule(verb="watch", resource=resource, action="expire-watch", times=times, **match))

    def remove(self, rule: FaultRule) -> None:
        if rule in self.rules:
            self.rules.remove(rule)

    def clear(self) -> None:
        self.rules.clear()

    def pick(self, info: RequestInfo, action: str) -> FaultRule | None:
        """The rule that fires for this request (counting the hit), if any."""
        for rule in self.rules:
            if rule.action != action or rule.exhausted or not rule.matches(info):
                continue
            if rule.probability < 1.0 and self._rng.random() >= rule.probability:
                continue
            rule.hits += 1
            return rule
        return None


def now() -> float:
    return time.monotonic()
