"""The SDK names a user reads about are the names they can import: every name docs/sdk.md shows or
mentions comes from ``kubedl_py`` itself, as its first line promises."""

from __future__ import annotations

import builtins
import re
import subprocess
import sys
from pathlib import Path

import pytest

import kubedl_py
from kubedl_py import sdk

DOCS = Path(__file__).resolve().parents[2] / "docs"
SDK_DOC = (DOCS / "sdk.md").read_text()
#: words in backticks that are values, not names to import: states and condition types
_STATES = {"Pending", "Created", "Running", "Restarting", "Succeeded", "Failed"}


def documented_imports() -> list[str]:
    """Every ``from kubedl_py import ...`` line of the docs."""
    lines: list[str] = []
    for page in sorted(DOCS.glob("*.md")):
        lines += re.findall(r"^from kubedl_py import .+$", page.read_text(), flags=re.MULTILINE)
    return lines


def documented_names() -> set[str]:
    """Class-like names docs/sdk.md mentions (in backticks or in its error tree), and its helper functions."""
    names = set(re.findall(r"`([A-Z][A-Za-z]+)[`(.\[]", SDK_DOC))
    tree = SDK_DOC.split("## Errors", 1)[1].split("```")[1]
    names |= set(re.findall(r"^[│├└─ ]*([A-Z][A-Za-z]+)", tree, flags=re.MULTILINE))
    names |= set(re.findall(r"\[([A-Z][A-Za-z]+)\(", tree))
    helpers = SDK_DOC.split("Helpers:", 1)[1].split("\n\n", 1)[0]
    names |= set(re.findall(r"`([a-z_]+)\(", helpers))
    # not states, builtins (TimeoutError) or environment variables (KUBECONFIG)
    return {name for name in names if name not in _STATES and not hasattr(builtins, name) and not name.isupper()}


@pytest.mark.parametrize("line", documented_imports())
def test_every_documented_import_line_works(line: str) -> None:
    exec(line, {})


def test_every_name_docs_sdk_mentions_comes_from_kubedl_py() -> None:
    names = documented_names()
    assert {"TrainingClient", "JobFailedError", "ClusterUnreachableError", "FieldError", "job_state"} <= names
    missing = sorted(name for name in names if not hasattr(kubedl_py, name))
    assert not missing, f"docs/sdk.md mentions names kubedl_py does not export: {missing}"


#: the public surface of the SDK, pinned: a name added to or removed from ``kubedl_py.sdk.__all__`` (the one list
#: of it) is a change of the public API, made here too on purpose
PUBLIC = [
    "AmbiguousJobError",
    "AsyncTrainingClient",
    "CONDITION_TYPES",
    "ClientSettings",
    "ClusterError",
    "ClusterUnreachableError",
    "ConfigurationError",
    "FieldError",
    "ForbiddenError",
    "InvalidJobError",
    "JobAlreadyExistsError",
    "JobDescription",
    "JobEndedError",
    "JobEvent",
    "JobFailedError",
    "JobNotFoundError",
    "JobProgress",
    "JobTimeoutError",
    "JobValidationError",
    "LogLine",
    "PodInfo",
    "PreviousAttempt",
    "PyTorchJob",
    "ResolvedConfig",
    "RetrySettings",
    "TFJob",
    "TrainingClient",
    "TrainingError",
    "job_age",
    "job_state",
    "pytorch_job",
    "replica_counts",
    "resolve_config",
    "tf_job",
    "training_job",
]


def test_the_public_surface_is_pinned() -> None:
    assert sorted(sdk.__all__) == sorted(PUBLIC)
    assert sorted(kubedl_py.__all__) == sorted([*PUBLIC, "__version__"])


def test_kubedl_py_exports_the_whole_sdk_surface() -> None:
    assert set(sdk.__all__) <= set(kubedl_py.__all__)
    for name in sdk.__all__:
        assert getattr(kubedl_py, name) is getattr(sdk, name)
    assert set(sdk.__all__) <= set(dir(kubedl_py))
    namespace: dict[str, object] = {}
    exec("from kubedl_py import *", namespace)
    assert {name for name in namespace if name != "__builtins__"} == {*sdk.__all__, "__version__"}


def test_importing_the_package_does_not_load_the_http_stack() -> None:
    """The controller and ``kubedl_py.api`` users import ``kubedl_py``; the SDK's names load on first use, and
    asking the package for anything else (a submodule, a name it lacks) does not load them."""
    probe = (
        "import sys, kubedl_py; from kubedl_py import api; print(hasattr(kubedl_py, 'nothing'), "
        "'aiohttp' in sys.modules, 'kubedl_py.sdk' in sys.modules); from kubedl_py import TrainingClient; "
        "print('kubedl_py.sdk' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "False", "True"]
