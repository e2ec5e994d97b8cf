"""The review APIs ``kubectl auth`` uses: access and rules reviews (``authorization.k8s.io/v1``) and
SelfSubjectReview (``authentication.k8s.io/v1``, ``kubectl auth whoami``); and TokenReview, with which a
component that delegates authentication (the controller's HTTPS ``/metrics``) asks who a token belongs to.

TokenReview is the one review that can say no here: a token authenticates only if this server issued it
(``serviceaccounts.review_token``), so a metrics endpoint refuses a missing or made-up token on the embedded
tier as it does on the real one; every authenticated ServiceAccount is then allowed by the access reviews.

The embedded server authenticates and authorizes nobody: every client is taken to be the cluster's
administrator (``kubernetes-admin`` in ``system:masters``, as the real control plane's admin kubeconfig), so
every access review is allowed and a rules review lists what a real cluster's bootstrap RBAC gives that
administrator: cluster-admin's everything, and what ``system:authenticated`` gets from system:basic-user,
system:discovery and system:public-info-viewer. Nothing is stored; the answer is the request with its status.
"""

from __future__ import annotations

from typing import Any

from kubedl_local.apiserver.errors import ApiError, FieldError
from kubedl_local.apiserver.resources import ResourceType, review_types

Obj = dict[str, Any]

AUTHORIZATION = "authorization.k8s.io"
AUTHENTICATION = "authentication.k8s.io"
USER = {"username": "kubernetes-admin", "groups": ["system:masters", "system:authenticated"]}


KEYS = frozenset(rt.key for rt in review_types())

#: the rules a real cluster's bootstrap policy gives its administrator, in the order RBAC reports them
RESOURCE_RULES: list[Obj] = [
    {"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]},
    {
        "verbs": ["create"],
        "apiGroups": [AUTHORIZATION],
        "resources": ["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
    },
    {"verbs": ["create"], "apiGroups": [AUTHENTICATION], "resources": ["selfsubjectreviews"]},
]
NON_RESOURCE_RULES: list[Obj] = [
    {
        "verbs": ["get"],
        "nonResourceURLs": [
            "/api",
            "/api/*",
            "/apis",
            "/apis/*",
            "/healthz",
            "/livez",
            "/openapi",
            "/openapi/*",
            "/readyz",
            "/version",
            "/version/",
        ],
    },
    {"verbs": ["get"], "nonResourceURLs": ["/healthz", "/livez", "/readyz", "/version", "/version/"]},
    {"verbs": ["*"], "nonResourceURLs": ["*"]},
]


def _invalid(errors: list[FieldError]) -> ApiError:
    """NewInvalid with the kind the decoder cleared: ``.authorization.k8s.io "" is invalid``."""
    messages = [e.message() for e in errors]
    joined = messages[0] if len(messages) == 1 else "[" + ", ".join(messages) + "]"
    causes = [{"reason": e.kind, "message": e.body(), "field": e.field} for e in errors]
    details = {"group": AUTHORIZATION, "causes": causes}
    return ApiError(422, f'.{AUTHORIZATION} "" is invalid: {joined}', "Invalid", details)


def _access_spec_errors(spec: Obj, *, self_review: bool) -> list[FieldError]:
    """ValidateSelfSubjectAccessReviewSpec / ValidateSubjectAccessReviewSpec."""
    errs: list[FieldError] = []
    resource, non_resource = spec.get("resourceAttributes"), spec.get("nonResourceAttributes")
    if (resource is None) == (non_resource is None):
        why = "exactly one of nonResourceAttributes or resourceAttributes must be specified"
        errs.append(FieldError("FieldValueInvalid", "spec", why, None))
    if not self_review and not spec.get("user") and not spec.get("groups"):
        errs.append(FieldError("FieldValueInvalid", "spec.user", "at least one of user or group must be specified", ""))
    return errs


def answer(rt: ResourceType, namespace: str, body: Obj, now: str, *, token_status: Obj | None = None) -> Obj:
    """The review ``body`` (decoded, with its managedFields) answered; ApiError 422 when it is invalid.
    ``token_status``: a TokenReview's status, as the caller (which holds the store) found it."""
    raw_spec = body.get("spec")
    spec: Obj = raw_spec if isinstance(raw_spec, dict) else {}
    head = {"kind": rt.kind, "apiVersion": rt.api_version()}
    if rt.kind == "TokenReview":
        metadata = {k: v for k, v in (body.get("metadata") or {}).items() if k == "creationTimestamp"}
        status = token_status or {"authenticated": False, "user": {}, "error": "invalid bearer token"}
        return {**head, "metadata": {"creationTimestamp": now, **metadata}, "spec": spec, "status": status}
    if rt.kind == "SelfSubjectReview":
        return {**head, "metadata": {"creationTimestamp": now}, "status": {"userInfo": dict(USER)}}
    if rt.kind == "SelfSubjectRulesReview":
        status = {"resourceRules": RESOURCE_RULES, "nonResourceRules": NON_RESOURCE_RULES, "incomplete": False}
        return {**head, "metadata": {}, "spec": {}, "status": status}
    errs = _access_spec_errors(spec, self_review=rt.kind == "SelfSubjectAccessReview")
    if rt.kind == "LocalSubjectAccessReview":
        sent = (spec.get("resourceAttributes") or {}).get("namespace")
        if spec.get("resourceAttributes") is not None and sent != namespace:
            why = "must match metadata.namespace"
            errs.append(FieldError("FieldValueInvalid", "spec.resourceAttributes.namespace", why, sent or ""))
    if errs:
        raise _invalid(errs)
    metadata = {k: v for k, v in (body.get("metadata") or {}).items() if k == "managedFields"}
    return {**head, "metadata": metadata, "spec": spec, "status": {"allowed": True}}
