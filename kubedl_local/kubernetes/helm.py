"""Helm, built from its Go module, to prove the chart in ``charts/kubedl-py`` as operators use it.

Why the real ``helm`` and not a reading of the chart's files: what an operator runs is ``helm lint``, ``helm
template``, ``helm install``, ``helm upgrade`` and ``helm uninstall``, and only Helm itself decides what its
template language renders, which of a chart's objects it creates, in which order, and what an uninstall
leaves behind (its ``crds/`` directory, by design). It is built like the control plane's neighbours
(:mod:`programs`): the ``helm.sh/helm/v4`` module at the version pinned in ``local/pins.py``, compiled once into
``~/.cache/kubedl-py/helm/v<version>/bin/helm``; nothing of Helm is committed. The version is stamped in as
Helm's own release build does, so ``helm version`` reports the pin.

:func:`run_helm` runs it with a kubeconfig and with every place Helm keeps state (its cache, configuration
and data directories, repositories, registry credentials) inside a directory of the caller's, so a test
neither reads nor writes the operator's own Helm setup.

``python -m kubedl_local.kubernetes.helm`` builds it (``make test`` runs it before pytest).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Final

from kubedl_local.kubernetes.binaries import BuildError
from kubedl_local.kubernetes.programs import GoProgram, ensure_program
from kubedl_local.pins import HELM_VERSION

HELM: Final = GoProgram(
    name="helm",
    module="helm.sh/helm/v4",
    version=f"v{HELM_VERSION}",
    commands={"helm": "helm.sh/helm/v4/cmd/helm"},
    # what Helm's Makefile stamps into a release build (internal/version): `helm version` names the pin
    ldflags=f"-s -w -X helm.sh/helm/v4/internal/version.version=v{HELM_VERSION}"
    " -X helm.sh/helm/v4/internal/version.gitTreeState=clean",
)


def helm_binary() -> Path:
    """The pinned ``helm``, built first when missing (minutes, once)."""
    return ensure_program(HELM)["helm"]


def helm_environment(home: Path, kubeconfig: Path | None = None) -> dict[str, str]:
    """The environment of one Helm invocation: its state kept under ``home``, the cluster of ``kubeconfig``."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("HELM_")}
    env.update(
        {
            "HELM_CACHE_HOME": str(home / "cache"),
            "HELM_CONFIG_HOME": str(home / "config"),
            "HELM_DATA_HOME": str(home / "data"),
            "HELM_PLUGINS": str(home / "plugins"),
            "HELM_REGISTRY_CONFIG": str(home / "registry.json"),
            "HELM_REPOSITORY_CACHE": str(home / "repository"),
            "HELM_REPOSITORY_CONFIG": str(home / "repositories.yaml"),
        }
    )
    env.pop("KUBECONFIG", None)
    if kubeconfig is not None:
        env["KUBECONFIG"] = str(kubeconfig)
    return env


def run_helm(
    *args: str, home: Path, kubeconfig: Path | None = None, timeout: float = 300
) -> subprocess.CompletedProcess[str]:
    """``helm ARGS`` with its state under ``home`` (see the module docstring); never raises on a non-zero exit."""
    home.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [str(helm_binary()), *args],
        env=helm_environment(home, kubeconfig),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def main() -> int:
    """``python -m kubedl_local.kubernetes.helm``: build (or find) the pinned Helm; print where it is."""
    try:
        built = ensure_program(HELM)
    except BuildError as exc:
        print(f"kubedl-py: {exc}", file=sys.stderr)
        return 1
    print(f"kubedl-py: Helm {HELM.version} in {built['helm'].parent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
