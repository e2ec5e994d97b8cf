"""Reading jobs from YAML/JSON files and strings, one or several documents per source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kubedl_py.api.jobs import Job
from kubedl_py.api.validation import FieldError, JobValidationError, parse_job


def load_documents(text: str, *, source: str = "<input>") -> list[Any]:
    """The non-empty YAML (or JSON) documents of ``text``."""
    try:
        return [doc for doc in yaml.safe_load_all(text) if doc is not None]
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc)
        raise JobValidationError(
            [FieldError("(document)", f"not valid YAML{where}: {problem}")], subject=source
        ) from None


def load_jobs(text: str, *, source: str = "<input>") -> list[Job]:
    """Every job in ``text``, validated; the first invalid document raises, naming its position."""
    documents = load_documents(text, source=source)
    if not documents:
        raise JobValidationError([FieldError("(document)", "no job found: the input is empty")], subject=source)
    jobs = []
    for position, document in enumerate(documents, start=1):
        label = source if len(documents) == 1 else f"{source} (document {position})"
        jobs.append(parse_job(document, source=label, pod_fields=True))  # a file being sent: as the CLI
    return jobs


def load_jobs_file(path: str | Path) -> list[Job]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise JobValidationError(
            [FieldError("(file)", f"cannot read {path}: {exc.strerror}")], subject=str(path)
        ) from None
    return load_jobs(text, source=str(path))
