"""Prometheus metrics of one controller manager, in a registry of its own.

Why not the process-global default registry: tests (and ``kubedl-py local up``) run several managers in one
process, and prometheus-client refuses to register the same metric name twice in one registry. Each
:class:`Metrics` therefore owns a ``CollectorRegistry``; the machinery's own series are created here, and
controllers add theirs (jobs created/running/succeeded/failed/restarted) through :meth:`Metrics.counter`
and :meth:`Metrics.gauge`, which return the existing metric when asked twice for the same name.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

__all__ = ["CONTENT_TYPE_LATEST", "Metrics"]

logger = logging.getLogger(__name__)

#: reconciles of a training job take from a millisecond (nothing to do) to seconds (many pods to create)
_RECONCILE_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class Metrics:
    """The metric series of one manager; ``render()`` is what ``/metrics`` serves."""

    def __init__(self, *, prefix: str = "kubedl", registry: CollectorRegistry | None = None) -> None:
        self.prefix = prefix
        self.registry = registry if registry is not None else CollectorRegistry(auto_describe=True)
        self._lock = threading.Lock()
        self._custom: dict[str, Counter | Gauge | Histogram] = {}
        self._collectors: dict[str, Collector] = {}
        self.reconcile_duration = Histogram(
            f"{prefix}_reconcile_duration_seconds",
            "Time spent in one reconcile call, by controller and outcome.",
            ["controller", "result"],
            buckets=_RECONCILE_BUCKETS,
            registry=self.registry,
        )
        self.reconcile_total = Counter(
            f"{prefix}_reconcile_total",
            "Reconcile calls, by controller and outcome (success, requeue, requeue_after, error).",
            ["controller", "result"],
            registry=self.registry,
        )
        self.queue_depth = Gauge(
            f"{prefix}_workqueue_depth",
            "Keys waiting in a work queue (not counting delayed ones or those being processed).",
            ["queue"],
            registry=self.registry,
        )
        self.queue_wait = Histogram(
            f"{prefix}_workqueue_queue_duration_seconds",
            "Seconds a key waited in a work queue before a worker took it, by queue and lane (urgent: the owner of"
            " a deleted or failing object; ordinary: everything else).",
            ["queue", "lane"],
            buckets=_RECONCILE_BUCKETS,
            registry=self.registry,
        )
        self.write_gate_wait = Histogram(
            f"{prefix}_write_gate_wait_seconds",
            "Seconds a write waited for urgent reconciles (jobs replacing a lost pod) to end before it was sent.",
            buckets=_RECONCILE_BUCKETS,
            registry=self.registry,
        )
        self.repairs = Counter(
            f"{prefix}_repairs_total",
            "Reconciles that repaired a running job (a lost pod seen terminating, or its replacement made); each"
            " opens or extends the repair window.",
            registry=self.registry,
        )
        self.repair_wait = Histogram(
            f"{prefix}_repair_wait_seconds",
            "Seconds a worker waited for a slot before taking its next key while running jobs were being repaired"
            " (the repair window: fewer reconciles of new and changed jobs at once), by controller; only workers"
            " that waited are counted.",
            ["controller"],
            buckets=_RECONCILE_BUCKETS,
            registry=self.registry,
        )
        self.queue_adds = Counter(
            f"{prefix}_workqueue_adds_total", "Keys added to a work queue.", ["queue"], registry=self.registry
        )
        self.queue_retries = Counter(
            f"{prefix}_workqueue_retries_total",
            "Rate-limited re-adds (reconcile errors) to a work queue.",
            ["queue"],
            registry=self.registry,
        )
        self.api_requests = Counter(
            f"{prefix}_api_requests_total",
            "API requests answered (watch streams counted once, when opened), by verb, resource and HTTP code.",
            ["verb", "resource", "code"],
            registry=self.registry,
        )
        self.api_errors = Counter(
            f"{prefix}_api_errors_total",
            "Failed API requests, by verb, resource and HTTP code (0 = no answer).",
            ["verb", "resource", "code"],
            registry=self.registry,
        )
        self.api_request_duration = Histogram(
            f"{prefix}_api_request_duration_seconds",
            "Seconds from sending an API request to its answer's headers (a watch: until the stream opened), by"
            " verb and resource; the write verbs (create, patch, update, delete) are the controller's write latency.",
            ["verb", "resource"],
            buckets=_RECONCILE_BUCKETS,
            registry=self.registry,
        )
        self.api_retries = Counter(
            f"{prefix}_api_retries_total",
            "API requests sent again by the retry policy, by verb and resource.",
            ["verb", "resource"],
            registry=self.registry,
        )
        self.leader = Gauge(
            f"{prefix}_leader",
            "1 while this process holds the leader-election lease.",
            ["lease"],
            registry=self.registry,
        )

    def counter(
        self, name: str, documentation: str, labelnames: Sequence[str] = (), *, prefixed: bool = True
    ) -> Counter:
        """A counter named ``<prefix>_<name>`` (``name`` as given with ``prefixed=False``: another project's
        metric name kept for its users' dashboards); asking again for the same name returns the same one."""
        metric = self._get_or_create(
            name, lambda full: Counter(full, documentation, list(labelnames), registry=self.registry), prefixed
        )
        if not isinstance(metric, Counter):
            raise TypeError(f"metric {name!r} already exists and is not a counter")
        return metric

    def gauge(self, name: str, documentation: str, labelnames: Sequence[str] = ()) -> Gauge:
        """A gauge named ``<prefix>_<name>``; asking again for the same name returns the same gauge."""
        metric = self._get_or_create(
            name, lambda full: Gauge(full, documentation, list(labelnames), registry=self.registry)
        )
        if not isinstance(metric, Gauge):
            raise TypeError(f"metric {name!r} already exists and is not a gauge")
        return metric

    def _get_or_create(
        self, name: str, make: Callable[[str], Counter | Gauge | Histogram], prefixed: bool = True
    ) -> Counter | Gauge | Histogram:
        full = f"{self.prefix}_{name}" if prefixed else name
        with self._lock:
            if full not in self._custom:
                self._custom[full] = make(full)
            return self._custom[full]

    def histogram(
        self, name: str, documentation: str, labelnames: Sequence[str] = (), *, buckets: Sequence[float]
    ) -> Histogram:
        """A histogram named ``<prefix>_<name>``; asking again for the same name returns the same one."""
        metric = self._get_or_create(
            name,
            lambda full: Histogram(
                full, documentation, list(labelnames), buckets=list(buckets), registry=self.registry
            ),
        )
        if not isinstance(metric, Histogram):
            raise TypeError(f"metric {name!r} already exists and is not a histogram")
        return metric

    def collector(self, name: str, collector: Collector) -> None:
        """Register series computed at scrape time (a gauge of what a cache holds, counted when asked) under
        ``name``; registering that name again replaces the earlier collector (a manager built anew)."""
        with self._lock:
            previous = self._collectors.pop(name, None)
            if previous is not None:
                self.registry.unregister(previous)
            self.registry.register(collector)
            self._collectors[name] = collector

    def value(self, name: str, labels: dict[str, str] | None = None) -> float | None:
        """The current value of a sample (tests and debugging); None when there is no such sample."""
        result = self.registry.get_sample_value(name, labels or {})
        return None if result is None else float(result)

    def render(self) -> bytes:
        """The registry in the Prometheus text exposition format."""
        return bytes(generate_latest(self.registry))
