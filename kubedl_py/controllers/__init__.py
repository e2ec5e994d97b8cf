"""The training-job controller: the reconcile of one job of any kind, its steps and the kinds' plug-ins.

``setup.py`` assembles it (informers, one reconciler per kind and API group, the steps in ``STEPS``);
``job.py`` is the reconcile, read top to bottom; ``steps.py`` is the contract of the cross-cutting steps
(``hostnetwork.py``, ``gang.py``, ``owned.py``, ``rdma.py``); ``kinds/`` holds the controller half of each job
kind. It talks to the cluster only over HTTP, through ``kubedl_py.kube`` (docs/architecture.md).
"""
