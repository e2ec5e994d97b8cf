"""The Kubeflow training SDK (1.9), unchanged, on kubedl-py: change one import and keep the script.

::

    from kubedl_py.sdk.kubeflow import TrainingClient   # was: from kubeflow.training import TrainingClient

Why a package of its own beside the native SDK: the two APIs answer different users. The native one
(:mod:`kubedl_py.sdk`) is typed, watch-based and raises the SDK's errors; this one keeps the Kubeflow
SDK's names, arguments, return shapes and exceptions so existing scripts and notebooks run as they are,
against jobs in ``kubeflow.org/v1`` and in ``training.kubedl.io/v1alpha1``. docs/kubeflow-sdk.md says what
works, what differs and what is not supported.

One idea per module: :mod:`.constants` (the Kubeflow SDK's), :mod:`.objects` (serialising models, the
attribute views, the two layouts), :mod:`.templates` (jobs built from a function or an image),
:mod:`.runner` (the private event loop), :mod:`.connection` (the asyncio calls), :mod:`.client`.
"""

from kubedl_py.sdk.kubeflow import constants
from kubedl_py.sdk.kubeflow.client import TrainingClient
from kubedl_py.sdk.kubeflow.objects import KubeObject

__all__ = ["KubeObject", "TrainingClient", "constants"]
