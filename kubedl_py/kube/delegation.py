"""Who may read ``/metrics``: the API server decides, with a TokenReview and a SubjectAccessReview.

Why delegate: the controller's metrics say how many jobs run, fail and restart in the cluster, which is not
for everyone who can reach the pod's port, and the controller has no users of its own. The caller shows the
bearer token the API server gave it (a Prometheus ServiceAccount's); a **TokenReview** asks the API server
who that is, and a **SubjectAccessReview** whether that user may ``get`` the non-resource URL ``/metrics``,
so RBAC (a ClusterRole with ``nonResourceURLs: ["/metrics"]``, shipped as the metrics-reader role) is the one
place access is granted. This is what controller-runtime's ``filters.WithAuthenticationAndAuthorization``
and kube-rbac-proxy do; the controller's ServiceAccount needs ``create`` on ``tokenreviews`` and
``subjectaccessreviews`` (the built-in ``system:auth-delegator`` ClusterRole), nothing else.

Answers: no bearer token, or one the API server does not authenticate, is **401**; an authenticated user that
RBAC does not allow is **403**; a review the API server could not answer is **500** (never a silent allow).

Decisions are cached for a few seconds (:attr:`DelegationSettings.ttl`), keyed by a digest of the token (the
token itself is never kept nor logged), so a Prometheus scraping every 15 s costs at most two reviews per
scrape and usually none; a revoked binding or deleted ServiceAccount takes effect within that time.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from kubedl_py.kube.client import KubeClient
from kubedl_py.kube.errors import KubeError
from kubedl_py.kube.priority import WriteGate
from kubedl_py.kube.resources import Resource

__all__ = ["SUBJECT_ACCESS_REVIEWS", "TOKEN_REVIEWS", "Decision", "DelegatedAuth", "DelegationSettings"]

logger = logging.getLogger(__name__)

TOKEN_REVIEWS = Resource("authentication.k8s.io", "v1", "tokenreviews", "TokenReview", namespaced=False)
SUBJECT_ACCESS_REVIEWS = Resource(
    "authorization.k8s.io", "v1", "subjectaccessreviews", "SubjectAccessReview", namespaced=False
)


@dataclass(frozen=True)
class DelegationSettings:
    #: seconds an answer (allowed or refused) is reused for the same token, path and verb
    ttl: float = 10.0
    #: answers kept at most (oldest dropped first): a flood of random tokens must not grow the process
    max_entries: int = 1024


@dataclass(frozen=True)
class Decision:
    """The answer to one request: its HTTP status (200, 401, 403 or 500) and why, for the response body."""

    status: int
    reason: str

    @property
    def allowed(self) -> bool:
        return self.status == 200


class DelegatedAuth:
    """Authenticates and authorizes a request's bearer token with the API server (module docstring)."""

    def __init__(
        self,
        client: KubeClient,
        *,
        settings: DelegationSettings | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.settings = settings or DelegationSettings()
        self._clock = clock
        self._cache: OrderedDict[tuple[str, str, str], tuple[float, Decision]] = OrderedDict()
        #: how many TokenReviews and SubjectAccessReviews were sent (tests: the cache works)
        self.reviews = 0

    async def check(self, authorization: str | None, *, path: str, verb: str = "get") -> Decision:
        """May the holder of ``authorization`` (an ``Authorization`` header) ``verb`` the URL ``path``?"""
        token = _bearer(authorization)
        if token is None:
            why = "send the bearer token of a ServiceAccount bound to the metrics reader role"
            return Decision(401, f"Unauthorized: {why}")
        key = (hashlib.sha256(token.encode()).hexdigest(), path, verb)
        cached = self._cache.get(key)
        now = self._clock()
        if cached is not None and cached[0] > now:
            return cached[1]
        try:
            with WriteGate.exempt():  # a review is no write to the cluster: never held behind a failover
                decision = await self._review(token, path, verb)
        except (KubeError, TimeoutError) as exc:
            logger.warning("cannot review a request for %s: %s", path, exc)
            return Decision(500, f"Internal Server Error: the API server did not answer the review: {exc}")
        self._cache[key] = (now + self.settings.ttl, decision)
        self._cache.move_to_end(key)
        while len(self._cache) > self.settings.max_entries:
            self._cache.popitem(last=False)
        return decision

    async def _review(self, token: str, path: str, verb: str) -> Decision:
        self.reviews += 1
        review = await self.client.create(
            TOKEN_REVIEWS,
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
        )
        status: dict[str, Any] = review.get("status") or {}
        if not status.get("authenticated"):
            why = status.get("error") or "the token is not valid"
            return Decision(401, f"Unauthorized: {why}")
        user: dict[str, Any] = status.get("user") or {}
        username = str(user.get("username") or "")
        spec: dict[str, Any] = {
            "user": username,
            "groups": list(user.get("groups") or []),
            "nonResourceAttributes": {"path": path, "verb": verb},
        }
        if user.get("uid"):
            spec["uid"] = user["uid"]
        if user.get("extra"):
            spec["extra"] = user["extra"]
        self.reviews += 1
        access = await self.client.create(
            SUBJECT_ACCESS_REVIEWS,
            {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec},
        )
        answer: dict[str, Any] = access.get("status") or {}
        if answer.get("allowed") and not answer.get("denied"):
            return Decision(200, "OK")
        why = answer.get("reason") or "no RBAC rule allows it"
        return Decision(403, f'Forbidden: user "{username}" cannot {verb} path "{path}": {why}')


def _bearer(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, or None."""
    if not authorization:
        return None
    scheme, _, token = authorization.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token:
        return None
    return token
