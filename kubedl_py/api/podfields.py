"""The field names of a pod template's parts in the pinned Kubernetes release (``k8s.io/api@v0.37.2``,
``core/v1/types.go``: ``PodSpec`` and ``Container``; ``ObjectMeta`` of ``meta/v1``), so that a typo such as
``comand:`` is refused before anything is sent, naming the field and the closest real one.

Why here and not only in the CRD: the job kinds' CRDs keep pod templates as they are written
(``x-kubernetes-preserve-unknown-fields``; the whole pod schema would make every CRD megabytes), so the API
server takes a misspelt field, and the controller's pod create is refused only later, leaving a Failed job. A
newer Kubernetes may add fields: one the list does not know yet is refused with the list's release named, and
the list is updated with the pinned release (``kubedl_local/pins.py``).
"""

from __future__ import annotations

from typing import Final

#: the release the lists are read from
RELEASE: Final = "v1.37.2"

POD_SPEC: Final = frozenset(
    {
        "volumes", "initContainers", "containers", "ephemeralContainers", "restartPolicy",
        "terminationGracePeriodSeconds", "activeDeadlineSeconds", "dnsPolicy", "nodeSelector",
        "serviceAccountName", "serviceAccount", "automountServiceAccountToken", "nodeName", "hostNetwork",
        "hostPID", "hostIPC", "shareProcessNamespace", "securityContext", "imagePullSecrets", "hostname",
        "subdomain", "affinity", "schedulerName", "tolerations", "hostAliases", "priorityClassName", "priority",
        "dnsConfig", "readinessGates", "runtimeClassName", "enableServiceLinks", "preemptionPolicy", "overhead",
        "topologySpreadConstraints", "setHostnameAsFQDN", "os", "hostUsers", "schedulingGates", "resourceClaims",
        "resources", "hostnameOverride", "schedulingGroup", "evictionResponders",
    }
)  # fmt: skip

CONTAINER: Final = frozenset(
    {
        "name", "image", "command", "args", "workingDir", "ports", "envFrom", "env", "resources", "resizePolicy",
        "restartPolicy", "restartPolicyRules", "volumeMounts", "volumeDevices", "livenessProbe", "readinessProbe",
        "startupProbe", "lifecycle", "terminationMessagePath", "terminationMessagePolicy", "imagePullPolicy",
        "securityContext", "stdin", "stdinOnce", "tty",
    }
)  # fmt: skip

OBJECT_META: Final = frozenset(
    {
        "name", "generateName", "namespace", "selfLink", "uid", "resourceVersion", "generation",
        "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "labels", "annotations",
        "ownerReferences", "finalizers", "managedFields",
    }
)  # fmt: skip

POD_TEMPLATE: Final = frozenset({"metadata", "spec"})
