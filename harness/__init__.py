"""Test and benchmark support that builds and runs other projects: not part of kubedl-py, never shipped.

Why apart from ``kubedl_py``: the peers the benchmark compares with (the Kubeflow Training Operator, KubeDL),
the gang schedulers the gang tests are judged by (scheduler-plugins, Volcano) and Kueue are built from their
Go modules and run beside the real control plane for tests and benches only; ``kubedl-py local up`` uses none
of them. Tests and ``bench/`` import this package from the checkout; ``make test`` builds what it needs
(``python -m harness.schedulers``, ``harness.kueue``, ``harness.peers``). It stands on the launcher of the real
control plane (``kubedl_local.kubernetes``) and the pins (``kubedl_local.pins``), never the reverse (an
import-linter contract).
"""
