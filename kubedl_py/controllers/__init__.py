"""The training-job controller: the reconcile of one job of any kind, its features and the kinds' plug-ins.

``setup.py`` assembles it (informers, one reconciler per kind and API group, the features in ``FEATURES``);
``job.py`` is the reconcile and the one place its order is written (``plan.py``, ``creation.py``,
``reporting.py``, ``writes.py`` and ``failures/`` are its parts); ``features.py`` holds the contracts of the
cross-cutting features (``hostnetwork/``, ``gang.py``, ``kueue.py``, ``rdma.py``); ``kinds/`` holds the
controller half of each job kind. It talks to the cluster only over HTTP, through ``kubedl_py.kube``
(docs/architecture.md).
"""
