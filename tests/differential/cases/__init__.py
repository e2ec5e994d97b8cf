"""The cases, by theme; importing a module registers its cases (harness.case)."""

from __future__ import annotations

import importlib

MODULES = (
    "kubectl_basic",
    "kubectl_write",
    "kubectl_meta",
    "pods",
    "http_objects",
    "http_lists",
    "http_errors",
    "gc",
    "crds",
    "discovery",
    "controller",
    "managed",
)


def load_all() -> None:
    for module in MODULES:
        importlib.import_module(f"{__name__}.{module}")
