"""How a reconcile ends early: the job cannot go on (``JobFailure``), or what it decided could not be written first
(``StaleDecision``)."""

from __future__ import annotations


class JobFailure(Exception):
    """A step found that the job cannot go on (a terminal condition): the reconcile marks it Failed with
    ``reason`` and records a Warning event. Raised, not returned, so no step has to thread it back."""

    def __init__(self, reason: str, message: str, *, event: str | None = None) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message
        #: the event's text (default: the message)
        self.event = event or message


class StaleDecision(Exception):
    """The status a reconcile decided could not be written before an act that needs it written first (a
    failed pod's deletion): the copy it was computed from is stale, or the job is gone. The reconcile ends
    without acting and runs again on the newer copy."""
