"""Packages that export their names on first use (PEP 562): ``kubedl_py.api`` and ``kubedl_py.kube``.

Why: a command that lists jobs must not import every model, the manager, Prometheus or the health server just
because it imported one submodule of the package (issue 52: a second of every ``kubedl-py`` call).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(package: str, where: Mapping[str, str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``, whose public names live in the modules
    ``where`` maps them to (a name that maps to ``package.name`` is that submodule itself)."""
    namespace = importlib.import_module(package).__dict__

    def __getattr__(name: str) -> Any:
        module_name = where.get(name)
        if module_name is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module = importlib.import_module(module_name)
        value = module if module_name == f"{package}.{name}" else getattr(module, name)
        namespace[name] = value  # found once: later lookups are plain attribute reads
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__
