"""``python -m kubedl_local.kubernetes``: build (or find) the pinned control plane; print where it is.

``make kube-binaries`` runs this, so the first build's progress shows in the terminal and a failure (no Go,
no network) ends with one message naming the fix instead of a traceback.
"""

from __future__ import annotations

import sys

from kubedl_local.kubernetes.binaries import BuildError, ensure_binaries


def main() -> int:
    try:
        found = ensure_binaries()
    except BuildError as exc:
        print(f"kubedl-py: {exc}", file=sys.stderr)
        return 1
    print(f"kubedl-py: Kubernetes v{found.kubernetes_version} in {found.kube_apiserver.parent}")
    print(f"kubedl-py: etcd v{found.etcd_version} in {found.etcd.parent}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
