"""Kubernetes quantities (``500m``, ``16Gi``, ``1e3``) as numbers, for what the API checks and the controller
adds up: ``schedulingPolicy.minResources`` must be quantities, and a PodGroup's computed ``minResources`` is
the sum of its pods' requests.

Only parsing and summing are needed here; the API server stores whatever canonical form it likes.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation
from typing import Final

#: SI suffix -> power of ten, and binary suffix -> power of two (also the exact parser's, local/quantity.py)
DECIMAL_SUFFIXES: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
BINARY_SUFFIXES: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}


def quantity_value(text: str | int | float) -> Decimal:
    """A Kubernetes quantity (``500m``, ``16Gi``, ``1e3``, ``2``) as a number; ValueError when it is not one."""
    raw = str(text).strip()
    for suffix, power in BINARY_SUFFIXES.items():
        if raw.endswith(suffix):
            return _number(raw[: -len(suffix)], raw) * (Decimal(2) ** power)
    if raw[-1:] in DECIMAL_SUFFIXES and raw[-1:]:
        return _number(raw[:-1], raw).scaleb(DECIMAL_SUFFIXES[raw[-1]])
    return _number(raw, raw)


def _number(digits: str, whole: str) -> Decimal:
    try:
        value = Decimal(digits)
    except InvalidOperation:
        raise ValueError(f"{whole!r} is not a quantity") from None
    if not value.is_finite():
        raise ValueError(f"{whole!r} is not a quantity")
    return value


def format_quantity(value: Decimal) -> str:
    """A sum of quantities, written back: whole numbers as they are, fractions in milli-units rounded up."""
    if value == value.to_integral_value():
        return str(int(value))
    return f"{math.ceil(value * 1000)}m"
