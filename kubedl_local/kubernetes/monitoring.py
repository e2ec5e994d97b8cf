"""The Prometheus Operator's ServiceMonitor and PodMonitor CRDs, read from its published Go module.

Why: the chart ships an optional ServiceMonitor and PodMonitor (``monitoring.coreos.com/v1``). Whether they
are valid is for the Prometheus Operator's own schema to say, and the real API server validates a custom
object against its CRD's schema (``--dry-run=server``), so the tests install these two CRDs, exactly as the
project publishes them in its module at the version pinned in ``local/pins.py`` (``module_source``: Go's module
cache, else the proxy), and have the rendered monitors checked. Nothing of theirs is committed or built.
"""

from __future__ import annotations

from typing import Any, Final

import yaml

from kubedl_local.kubernetes.programs import GoProgram, module_source
from kubedl_local.pins import PROMETHEUS_OPERATOR_VERSION

PROMETHEUS_OPERATOR: Final = GoProgram(
    name="prometheus-operator",
    module="github.com/prometheus-operator/prometheus-operator",
    version=f"v{PROMETHEUS_OPERATOR_VERSION}",
    commands={},  # nothing is built: only its CRD manifests are read
)
CRD_FILES: Final = (
    "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
    "example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml",
)


def monitor_crds() -> list[dict[str, Any]]:
    """The ServiceMonitor and PodMonitor CRDs of the pinned Prometheus Operator release."""
    root = module_source(PROMETHEUS_OPERATOR)
    return [yaml.safe_load((root / name).read_text()) for name in CRD_FILES]
