"""The API's validation errors: what every layer (the SDK, the CLI, the controller) reports for a bad job.

Its own module, importing nothing, so that the kinds' validation rules (``kubedl_py/api/kinds/``) and the
generic validation (``validation.py``) can both raise them without importing each other.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class FieldError:
    """One problem: ``field`` is a dotted path such as ``spec.pytorchReplicaSpecs.Master.replicas``."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


class JobValidationError(ValueError):
    """The job is not valid; ``errors`` lists every problem found."""

    def __init__(self, errors: Iterable[FieldError], *, subject: str = "job") -> None:
        self.errors = list(errors)
        self.subject = subject
        super().__init__(str(self))

    def __str__(self) -> str:
        lines = "\n".join(f"  {error}" for error in self.errors)
        return f"invalid {self.subject}:\n{lines}"
