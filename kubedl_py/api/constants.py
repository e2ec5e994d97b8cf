"""Names that are promises to users: API group, labels, annotations, the first two kinds' resource names.

Everything that appears on a cluster object and that users or other tools may select on lives here, so a
rename is one diff and a test can pin it down (docs/controller.md and docs/api.md list them). What a kind
names itself (its replica types, container, port) is its plug-in's ``Framework``
(``kubedl_py/api/kinds/<kind>.py``); the kind and plural of PyTorchJob and TFJob stay here too, as the
resources tests and benchmarks address.
"""

from __future__ import annotations

from typing import Final

from kubedl_py._version import __version__

#: the controller's image and namespace when the install says none (``kubedl-py manifests``, the chart)
DEFAULT_IMAGE: Final = f"kubedl-py:{__version__}"
DEFAULT_NAMESPACE: Final = "kubedl-system"

GROUP: Final = "training.kubedl.io"
VERSION: Final = "v1alpha1"
API_VERSION: Final = f"{GROUP}/{VERSION}"

PYTORCH_KIND: Final = "PyTorchJob"
PYTORCH_PLURAL: Final = "pytorchjobs"
TF_KIND: Final = "TFJob"
TF_PLURAL: Final = "tfjobs"

# Labels on every pod and Service the controller creates.
LABEL_JOB_NAME: Final = f"{GROUP}/job-name"
LABEL_REPLICA_TYPE: Final = f"{GROUP}/replica-type"
LABEL_REPLICA_INDEX: Final = f"{GROUP}/replica-index"
LABEL_JOB_ROLE: Final = f"{GROUP}/job-role"
# The job's uid, on its pods and in its Services' selectors: a Service selects only the pods of its own job, never
# those of another job of the same name (a kubeflow.org and a training.kubedl.io job, a TFJob and a PyTorchJob)
# or a pod someone made with the job's names and labels (docs/host-network.md, "Whose objects").
LABEL_JOB_UID: Final = f"{GROUP}/job-uid"
# Which controller created the object: lets the informers cache only what is ours.
LABEL_CONTROLLER: Final = f"{GROUP}/controller"
CONTROLLER_NAME: Final = "kubedl-py"

# Host-network mode switch (on the job) and the audit record of the chosen port (on each pod).
ANNOTATION_NETWORK_MODE: Final = "kubedl.io/network-mode"
NETWORK_MODE_HOST: Final = "host"
NETWORK_MODE_POD: Final = "pod"
#: the values the annotation accepts (any other is refused at create: a misspelt mode must not run silently)
NETWORK_MODES: Final = (NETWORK_MODE_HOST, NETWORK_MODE_POD)
#: host ports one pod may declare, the framework's included (the default of ``--max-host-ports-per-pod``): a
#: job must not take a node's ports in thousands
DEFAULT_MAX_HOST_PORTS_PER_POD: Final = 8
ANNOTATION_HOST_PORT: Final = f"{GROUP}/host-port"
# Which replicas get a Service (on the job): only those their peers dial, or every one (docs/controller.md).
ANNOTATION_REPLICA_SERVICES: Final = "kubedl.io/replica-services"
REPLICA_SERVICES_DIALED: Final = "dialed"
REPLICA_SERVICES_ALL: Final = "all"
#: the values the annotation accepts (any other is refused: a misspelt value must not drop Services silently)
REPLICA_SERVICES: Final = (REPLICA_SERVICES_DIALED, REPLICA_SERVICES_ALL)

# Kubernetes limits that bound our names: a Service name is a DNS-1035 label.
MAX_SERVICE_NAME: Final = 63
# Upper bound on the replicas of one job. A job of 100,000 pods is a typo or an attack, not a workload;
# refusing it in the schema keeps the controller from trying to create it.
MAX_TOTAL_REPLICAS: Final = 10_000

# Where `kubedl-py local up` writes the kubeconfig of the embedded cluster unless told otherwise, so the SDK and
# the CLI can point a user with no other configuration at a running local cluster (``~`` is expanded).
LOCAL_KUBECONFIG: Final = "~/.kubedl-py/local.kubeconfig"
