"""Service accounts as pods see them: the TokenRequest API, the ServiceAccount admission volume, and the
``kube-root-ca.crt`` ConfigMap of every namespace.

Why: a real API server's ServiceAccount admission adds a ``kube-api-access-<random>`` projected volume to
every pod (token from the TokenRequest API, ``ca.crt`` from the ``kube-root-ca.crt`` ConfigMap that the
root-CA publisher keeps in every namespace, and the namespace from the downward API), mounted read-only at
``/var/run/secrets/kubernetes.io/serviceaccount`` in each container; node agents fill it. The embedded
server does the same minimum so pods (and the agents' volume code) see the same on both control planes.

The embedded server has no authentication, so a token is any string: it issues unsigned JWT-shaped tokens
(``alg: none``) carrying the usual claims, so a client that decodes them finds what it expects.
"""

from __future__ import annotations

import base64
import random
import time
import uuid
from typing import Any

import orjson

from kubedl_local.apiserver.errors import ApiError, FieldError, bad_request, invalid, not_found
from kubedl_local.storage.store import Obj, Store

#: our own generator: background threads must not move the global one (tests seed it; hypothesis checks it)
_RNG = random.Random()

MOUNT_PATH = "/var/run/secrets/kubernetes.io/serviceaccount"
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"
DEFAULT_EXPIRATION = 3607  # what the admission plugin asks for (an hour and a bit, so refreshes are visible)
_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def admit_pod(store: Store, pod: Obj) -> None:
    """Add the ``kube-api-access-*`` volume and its mounts, unless automounting is switched off."""
    spec = pod.get("spec")
    if not isinstance(spec, dict):
        return
    ns = (pod.get("metadata") or {}).get("namespace", "")
    sa_name = spec.get("serviceAccountName") or "default"
    automount = spec.get("automountServiceAccountToken")
    if automount is None:
        sa = store.get(("", "serviceaccounts"), ns, sa_name)
        automount = (sa or {}).get("automountServiceAccountToken", True)
    if automount is False:
        return
    containers = [c for key in ("initContainers", "containers") for c in spec.get(key) or [] if isinstance(c, dict)]
    if any(m.get("mountPath") == MOUNT_PATH for c in containers for m in c.get("volumeMounts") or []):
        return
    volumes = spec.setdefault("volumes", [])
    if not isinstance(volumes, list):
        return
    name = "kube-api-access-" + "".join(_RNG.choices(_SUFFIX, k=5))
    volumes.append(
        {
            "name": name,
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {"serviceAccountToken": {"expirationSeconds": DEFAULT_EXPIRATION, "path": "token"}},
                    {"configMap": {"name": ROOT_CA_CONFIGMAP, "items": [{"key": "ca.crt", "path": "ca.crt"}]}},
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.namespace"},
                                    "path": "namespace",
                                }
                            ]
                        }
                    },
                ],
            },
        }
    )
    for c in containers:
        c.setdefault("volumeMounts", []).append({"name": name, "mountPath": MOUNT_PATH, "readOnly": True})


def token_request(store: Store, namespace: str, sa_name: str, body: Any, *, issuer: str) -> Obj:
    """``POST serviceaccounts/{name}/token``: a TokenRequest answered with a token and its expiry."""
    if not isinstance(body, dict):
        raise bad_request("the body of the request must be a JSON object")
    sa = store.get(("", "serviceaccounts"), namespace, sa_name)
    if sa is None:
        raise not_found("", "serviceaccounts", sa_name)
    spec = dict(body.get("spec") or {})
    seconds = spec.get("expirationSeconds") or 3600
    if not isinstance(seconds, int) or seconds < 600:
        raise invalid(
            "TokenRequest",
            "authentication.k8s.io",
            "",
            "",  # the real server validates before naming the request: 'TokenRequest... "" is invalid'
            [
                FieldError(
                    "FieldValueInvalid",
                    "spec.expirationSeconds",
                    "may not specify a duration less than 10 minutes",
                    seconds,
                )
            ],
        )
    audiences = list(spec.get("audiences") or []) or ["https://kubernetes.default.svc.cluster.local"]
    now = int(time.time())
    claims: Obj = {
        "aud": audiences,
        "exp": now + seconds,
        "iat": now,
        "nbf": now,
        "iss": issuer,
        "jti": str(uuid.uuid4()),
        "sub": f"system:serviceaccount:{namespace}:{sa_name}",
        "kubernetes.io": {
            "namespace": namespace,
            "serviceaccount": {"name": sa_name, "uid": sa["metadata"].get("uid", "")},
        },
    }
    ref = spec.get("boundObjectRef")
    if isinstance(ref, dict) and ref.get("kind") == "Pod":
        pod = store.get(("", "pods"), namespace, str(ref.get("name", "")))
        if pod is None or (ref.get("uid") and pod["metadata"].get("uid") != ref.get("uid")):
            raise ApiError(404, f'pods "{ref.get("name")}" not found', "NotFound")
        claims["kubernetes.io"]["pod"] = {"name": ref.get("name"), "uid": pod["metadata"].get("uid")}
    token = ".".join(
        [_b64(orjson.dumps({"alg": "none", "typ": "JWT"})), _b64(orjson.dumps(claims)), ""]
    )  # unsigned: the embedded server authenticates nobody
    spec.update(audiences=audiences, expirationSeconds=seconds)
    spec.setdefault("boundObjectRef", None)
    meta: Obj = {
        "name": sa_name,
        "namespace": namespace,
        "uid": sa["metadata"].get("uid", ""),  # the ServiceAccount's, as the real TokenREST fills it in
        "creationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now)),
    }
    return {
        "kind": "TokenRequest",
        "apiVersion": "authentication.k8s.io/v1",
        "metadata": meta,
        "spec": spec,
        "status": {
            "token": token,
            "expirationTimestamp": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + seconds)),
        },
    }


def root_ca_configmap(ca_pem: bytes) -> Obj:
    """The ConfigMap the root-CA publisher keeps in every namespace."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": ROOT_CA_CONFIGMAP,
            "annotations": {
                "kubernetes.io/description": "Contains a CA bundle that can be used to verify the "
                "kube-apiserver when using internal endpoints such as the internal service IP or "
                "kubernetes.default.svc. No other usage is guaranteed across distributions of Kubernetes clusters."
            },
        },
        "data": {"ca.crt": ca_pem.decode()},
    }


def review_token(store: Store, token: str, *, issuer: str, now: float | None = None) -> Obj:
    """A TokenReview's status for ``token``: authenticated when it is a token this server issued (the issuer,
    unexpired) for a ServiceAccount that still exists with the uid it was issued for, as a real API server's
    ServiceAccount authenticator decides; the user is that ServiceAccount with its groups."""
    claims = _claims(token)
    refused: Obj = {"authenticated": False, "user": {}, "error": "invalid bearer token"}
    if claims is None or claims.get("iss") != issuer:
        return refused
    if not isinstance(claims.get("exp"), int) or claims["exp"] <= (time.time() if now is None else now):
        return {**refused, "error": "invalid bearer token, token has expired"}
    private = claims.get("kubernetes.io") or {}
    namespace = str(private.get("namespace") or "")
    account = private.get("serviceaccount") or {}
    sa = store.get(("", "serviceaccounts"), namespace, str(account.get("name") or ""))
    if sa is None or sa["metadata"].get("uid", "") != account.get("uid"):
        return {**refused, "error": "invalid bearer token, service account has been deleted or recreated"}
    name = sa["metadata"]["name"]
    user: Obj = {
        "username": f"system:serviceaccount:{namespace}:{name}",
        "uid": sa["metadata"].get("uid", ""),
        "groups": ["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
    }
    extra: Obj = {}
    if "pod" in private:
        extra["authentication.kubernetes.io/pod-name"] = [private["pod"].get("name")]
        extra["authentication.kubernetes.io/pod-uid"] = [private["pod"].get("uid")]
    extra["authentication.kubernetes.io/credential-id"] = [f"JTI={claims.get('jti')}"]
    user["extra"] = extra
    return {"authenticated": True, "user": user, "audiences": list(claims.get("aud") or [])}


def _claims(token: str) -> Obj | None:
    """The claims of a token shaped as :func:`token_request` makes them; None for anything else."""
    parts = token.split(".")
    if len(parts) != 3 or parts[2]:
        return None
    try:
        header = orjson.loads(base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)))
        claims = orjson.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, orjson.JSONDecodeError):
        return None
    if not isinstance(header, dict) or header.get("alg") != "none" or not isinstance(claims, dict):
        return None
    return claims
