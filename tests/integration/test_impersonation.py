"""Impersonation from a kubeconfig (``as``, ``as-groups``) as the real kube-apiserver reads it.

kube-apiserver takes each ``Impersonate-Group`` header line as one group; kubedl_py/kube/kubeconfig.py once
joined them into one comma-separated line, which the server would read as a single group named ``dev,ops``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from kubedl_py.kube.client import ClientSettings, KubeClient
from kubedl_py.kube.resources import Resource
from kubedl_py.kube.retry import RetrySettings
from tests.integration.conftest import Env
from tests.tiers import KUBERNETES

SELF_SUBJECT_REVIEWS = Resource("authentication.k8s.io", "v1", "selfsubjectreviews", "SelfSubjectReview", False)


def impersonating(kubeconfig: Path, into: Path, user: str, groups: list[str]) -> Path:
    document: dict[str, Any] = yaml.safe_load(kubeconfig.read_text())
    for entry in document["users"]:
        entry["user"].update({"as": user, "as-groups": groups})
    into.write_text(yaml.safe_dump(document))
    return into


async def test_the_real_api_server_sees_every_impersonated_group(cluster: Env, tmp_path: Path) -> None:
    """Impersonating with two groups, the review ``kubectl auth whoami`` asks for lists both, and the user."""
    if cluster.tier != KUBERNETES:
        pytest.skip("the embedded API server does not implement impersonation; the real one does")
    config = impersonating(Path(cluster.kubeconfig_path), tmp_path / "impersonating", "jane", ["dev", "ops"])
    async with KubeClient(kubeconfig=config, settings=ClientSettings(retry=RetrySettings(attempts=1))) as kube:
        review = await kube.create(
            SELF_SUBJECT_REVIEWS, {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        )
    user = review["status"]["userInfo"]
    assert user["username"] == "jane"
    assert {"dev", "ops"} <= set(user["groups"]), user
