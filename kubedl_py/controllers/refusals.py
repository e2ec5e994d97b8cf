"""What the API server's refusal to create one of a job's pods or Services means for the job.

Why a module of its own: a real API server refuses objects for reasons the controller must tell apart, and
the HTTP status alone does not: a 403 is RBAC, admission policy, quota, a namespace being deleted or a
ServiceAccount not made yet. Treating them alike either fails jobs that would start a second later or retries
forever, silently, jobs that can never start (the embedded cluster never refused, so neither showed).

The decision, by what the server said (its Status message is quoted into the job's condition and event):

==============================================  ========================  ===========================
refusal                                         outcome                   why
==============================================  ========================  ===========================
422 Invalid (field validation)                  job Failed, InvalidSpec   the spec cannot work as written
400 BadRequest (strict decoding, wrong types)   job Failed, InvalidSpec   the same, found by the decoder
403 PodSecurity, missing PriorityClass,         job Failed,               the namespace's policy forbids
    admission webhook or policy denial          AdmissionRefused          this pod; only the user can fix
403 exceeded quota                              retried with backoff,     quota frees up as other
                                                Warning event             work finishes
403 ServiceAccount not found                    retried with backoff,     a new namespace's default
                                                Warning event             ServiceAccount comes shortly
403 RBAC (the controller may not create)        retried with backoff,     an installation fault the
                                                Warning event             operator fixes; jobs then run
403 namespace terminating, 404                  nothing to do             the job is going away too
==============================================  ========================  ===========================

Pods are created with ``fieldValidation=Strict``: a field of the user's pod template that the API server's
pod schema does not know (``imagee: x``, a misindented ``resources``) is a 400, not silently dropped, and
:func:`in_template` says which replica type's template holds it, at the path the user wrote
(``spec.pytorchReplicaSpecs.Master.template.spec.containers[0].imagee``). The cluster's own schema is the
judge, so a field of a newer Kubernetes than kubedl-py knows is accepted wherever the cluster has it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import Enum

from kubedl_py.kube import errors


class Outcome(Enum):
    FAIL = "fail"  # the job cannot run as written: fail it with the reason
    RETRY = "retry"  # may work later: Warning event, retry with the work queue's backoff
    GONE = "gone"  # the namespace or job is going away: nothing to do


@dataclass(frozen=True)
class Refusal:
    """One refused create, classified."""

    outcome: Outcome
    #: the job condition's / event's reason: InvalidSpec, AdmissionRefused, QuotaExceeded, FailedCreate
    reason: str
    #: the server's own words, naming the object
    message: str

    def __str__(self) -> str:
        return self.message


_ADMISSION_MARKERS = (
    "violates PodSecurity",
    "no PriorityClass with name",
    "admission webhook",
    "ValidatingAdmissionPolicy",
    "denied the request",
)


def classify_refusal(error: errors.ApiError) -> Refusal:
    """Classify a refused create of a pod or Service."""
    message = error.message
    if isinstance(error, errors.Invalid | errors.BadRequest):
        return Refusal(Outcome.FAIL, "InvalidSpec", message)
    if isinstance(error, errors.NotFound):
        return Refusal(Outcome.GONE, "NamespaceGone", message)
    if isinstance(error, errors.Forbidden):
        if "being terminated" in message or any(c.reason == "NamespaceTerminating" for c in error.causes):
            return Refusal(Outcome.GONE, "NamespaceTerminating", message)
        if "exceeded quota" in message:
            return Refusal(Outcome.RETRY, "QuotaExceeded", message)
        if "error looking up service account" in message:
            return Refusal(Outcome.RETRY, "FailedCreate", message)
        if "cannot create resource" in message:  # RBAC: the controller's own permissions
            return Refusal(Outcome.RETRY, "FailedCreate", message)
        if any(marker in message for marker in _ADMISSION_MARKERS):
            return Refusal(Outcome.FAIL, "AdmissionRefused", message)
        # Any other 403 on create comes from an admission plugin we do not know by name: a policy decision.
        return Refusal(Outcome.FAIL, "AdmissionRefused", message)
    return Refusal(Outcome.RETRY, "FailedCreate", message)


#: the fields a strict decoding error names: ``unknown field "spec.containers[0].imagee"``
_UNKNOWN_FIELD = re.compile(r'unknown field "([^"]+)"')


def in_template(refusal: Refusal, *, specs_field: str, replica_type: str) -> Refusal:
    """A refused pod's refusal, told in terms of the job: the replica type whose template made the pod, and
    unknown fields at their path in the job (``spec.<specs_field>.<type>.template.<pod path>``)."""
    unknown = _UNKNOWN_FIELD.findall(refusal.message) if refusal.reason == "InvalidSpec" else []
    if unknown:
        paths = ", ".join(f"spec.{specs_field}.{replica_type}.template.{path}" for path in unknown)
        noun = "an unknown field" if len(unknown) == 1 else "unknown fields"
        message = (
            f"the {replica_type} pod template has {noun} (not in the API server's pod schema): {paths}; "
            "check the spelling and indentation"
        )
        return replace(refusal, message=message)
    return replace(refusal, message=f"the {replica_type} pod: {refusal.message}")
