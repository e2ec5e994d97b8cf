"""Kubernetes quantities (``500m``, ``16Gi``, ``1e3``): ``resource.Quantity`` exactly as the API server parses and
prints it, and as numbers for what the API checks and the controller adds up.

Why one module: the product reads quantities (``schedulingPolicy.minResources`` must be quantities; a
PodGroup's computed ``minResources`` is the sum of its pods' requests) and the embedded API server stores their
canonical form; two parsers would disagree on the corners (a product that accepted ``1_000``, which Python's
``Decimal`` reads, would send the real server something it refuses). So there is one parser, a port of
``k8s.io/apimachinery/pkg/api/resource`` (``ParseQuantity``, ``CanonicalizeBytes``, ``RoundUp``), corners
included, all observed on the real server: a string already in canonical form is kept as written (``"+1"``,
``"01"``, ``"1e3"``, ``"1."``), values are rounded up (away from zero) to nano units, binary-suffixed values
are capped at 2^63-1 (``9Ei`` is ``"9223372036854775807"``), and a decimal exponent with no SI suffix
prints without one (``1000E`` is ``"1"``).

``round_up(q, -3)`` is ``SetDefaults_ResourceList``: every ``ResourceList`` value of core/v1 (requests,
limits, capacity, quota) is rounded up to milli-units (``0.0001`` is ``"1m"``). ``quantity_value`` is that
parse as a ``Decimal``; ``format_quantity`` writes a sum back.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Final

#: SI suffix -> power of ten, and binary suffix -> power of two
DECIMAL_SUFFIXES: Final = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
BINARY_SUFFIXES: Final = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}

ERR_FORMAT = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
ERR_NUMERIC = "unable to parse numeric part of quantity"
ERR_SUFFIX = "unable to parse quantity's suffix"

DECIMAL_SI = "DecimalSI"
BINARY_SI = "BinarySI"
DECIMAL_EXPONENT = "DecimalExponent"

MAX_INT64 = 2**63 - 1
_NANO = -9
_DECIMAL_BY_EXPONENT = {v: k for k, v in DECIMAL_SUFFIXES.items()}
_BINARY_BY_EXPONENT = {v: k for k, v in BINARY_SUFFIXES.items()}
_SUFFIX_CHARS = frozenset("eEinumkKMGTP")
#: ASCII digits only, as Go's parser: ``str.isdigit`` also takes other scripts' digits
_DIGITS = frozenset("0123456789")


class QuantityError(ValueError):
    """Not a quantity; the message is the real server's."""


@dataclass(frozen=True)
class Quantity:
    #: the value is ``unscaled * 10**scale`` (exact)
    unscaled: int
    scale: int
    format: str
    #: the string as written, when the real server keeps it (already canonical)
    text: str | None = None
    #: parsed on the int64 fast path (which keeps ``text`` through ``round_up`` when no rounding is needed)
    fast: bool = True

    def __str__(self) -> str:
        return self.text if self.text is not None else _canonical(self)


def _split(text: str) -> tuple[bool, str, str, str]:
    """``parseQuantityString``: (positive, numerator digits, denominator digits, suffix)."""
    positive = True
    pos, end = 0, len(text)
    if pos < end and text[0] in "+-":
        positive = text[0] != "-"
        pos += 1
    while pos < end and text[pos] == "0":  # leading zeros
        pos += 1
    if pos >= end:
        return positive, "0", "", ""
    start = pos
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    num = text[start:pos] or "0"
    if pos >= end:
        return positive, num, "", ""
    denom = ""
    if text[pos] == ".":
        pos += 1
        start = pos
        while pos < end and text[pos] in _DIGITS:
            pos += 1
        denom = text[start:pos]
        if pos >= end:
            return positive, num, denom, ""
    suffix_start = pos
    while pos < end and text[pos] in _SUFFIX_CHARS:
        pos += 1
    if pos < end and text[pos] in "+-":
        pos += 1
    while pos < end and text[pos] in _DIGITS:
        pos += 1
    if pos < end:
        raise QuantityError(ERR_FORMAT)
    return positive, num, denom, text[suffix_start:]


def _interpret(suffix: str) -> tuple[int, int, str]:
    if suffix in DECIMAL_SUFFIXES:
        return 10, DECIMAL_SUFFIXES[suffix], DECIMAL_SI
    if suffix in BINARY_SUFFIXES:
        return 2, BINARY_SUFFIXES[suffix], BINARY_SI
    if len(suffix) > 1 and suffix[0] in "eE":
        digits = suffix[1:]
        body = digits[1:] if digits[0] in "+-" else digits
        if bool(body) and all(c in _DIGITS for c in body) and abs(int(digits)) <= MAX_INT64:
            exponent = int(digits)
            return 10, (exponent + 2**31) % 2**32 - 2**31, DECIMAL_EXPONENT  # Go's int32() conversion
    raise QuantityError(ERR_SUFFIX)


def parse(text: str) -> Quantity:
    """``resource.ParseQuantity``."""
    if not text:
        raise QuantityError(ERR_FORMAT)
    if text == "0":
        return Quantity(0, 0, DECIMAL_SI, "0")
    positive, num, denom, suffix = _split(text)
    base, exponent, fmt = _interpret(suffix)
    mantissa = 1
    if fmt in (DECIMAL_EXPONENT, DECIMAL_SI):
        scale = exponent
        precision = 18 - (len(num) + len(denom))
    elif exponent >= 0 and not denom:
        scale = 0
        mantissa = 1 << exponent
        precision = 15 - len(num) - int(exponent * 3 / 10) - 1
    else:
        scale, precision = 0, -1
    if precision >= 0:
        scale -= len(denom)
        if scale >= _NANO:
            shifted = num + denom
            value = int(shifted)
            result = value * mantissa
            if result <= MAX_INT64:
                if not positive:
                    result = -result
                if fmt == BINARY_SI:
                    keep = exponent % 10 == 0 and value & 0x07 != 0
                else:
                    keep = scale % 3 == 0 and not shifted.endswith("000") and shifted[0] != "0"
                return Quantity(result, scale, fmt, text if keep else None)
    # The arbitrary-precision path (inf.Dec).
    unscaled = int(num + denom)
    scale = -len(denom)
    if base == 10:
        scale += exponent
    else:
        unscaled <<= exponent
    if unscaled and scale < _NANO:  # round up, away from zero, to nano units
        unscaled = -(-unscaled // 10 ** (_NANO - scale))
        scale = _NANO
    if fmt == BINARY_SI and _cmp(unscaled, scale, MAX_INT64) > 0:
        unscaled, scale = MAX_INT64, 0
    if fmt == BINARY_SI and unscaled > 0 and _cmp(unscaled, scale, 1) < 0:
        fmt = DECIMAL_SI
    return Quantity(unscaled if positive else -unscaled, scale, fmt, None, fast=False)


def _cmp(unscaled: int, scale: int, other: int) -> int:
    left, right = (unscaled, other * 10 ** (-scale)) if scale < 0 else (unscaled * 10**scale, other)
    return (left > right) - (left < right)


def _round_away(unscaled: int, scale: int, to: int) -> tuple[int, int, bool]:
    """``unscaled * 10**scale`` rounded away from zero to a multiple of ``10**to``; and whether exact."""
    if scale >= to:
        return unscaled, scale, True
    step = 10 ** (to - scale)
    magnitude, remainder = divmod(abs(unscaled), step)
    if remainder:
        magnitude += 1
    return (magnitude if unscaled >= 0 else -magnitude), to, remainder == 0


def _remove_factors(value: int, factor: int) -> tuple[int, int]:
    times = 0
    while value and value % factor == 0:
        value //= factor
        times += 1
    return value, times


def _canonical(q: Quantity) -> str:
    """``Quantity.CanonicalizeBytes``."""
    if q.unscaled == 0:
        return "0"
    fmt = q.format
    rounded = 0
    if fmt == BINARY_SI:
        if _cmp(q.unscaled, q.scale, -1024) > 0 and _cmp(q.unscaled, q.scale, 1024) < 0:
            fmt = DECIMAL_SI
        else:
            value, scale, exact = _round_away(q.unscaled, q.scale, 0)
            rounded = value * 10**scale
            if not exact:
                fmt = DECIMAL_SI
    elif fmt != DECIMAL_SI:
        fmt = DECIMAL_EXPONENT
    if fmt == BINARY_SI:
        amount, times = _remove_factors(rounded, 1024)
        return f"{amount}{_BINARY_BY_EXPONENT.get(times * 10, '')}"
    amount, times = _remove_factors(q.unscaled, 10)
    exponent = q.scale + times
    while exponent % 3:
        amount *= 10
        exponent -= 1
    if fmt == DECIMAL_EXPONENT:
        return f"{amount}" + (f"e{exponent}" if exponent else "")
    return f"{amount}{_DECIMAL_BY_EXPONENT.get(exponent, '')}"


def round_up(q: Quantity, scale: int = -3) -> Quantity:
    """``Quantity.RoundUp``: at least ``10**scale`` units, away from zero; the text survives only when the
    fast-path value needed no rounding."""
    if q.fast and q.scale >= scale:
        return q
    unscaled, new_scale, _ = _round_away(q.unscaled, q.scale, scale)
    return replace(q, unscaled=unscaled, scale=new_scale, text=None)


def canonical(value: object, *, milli: bool = False) -> str:
    """The stored form of a quantity given as JSON (a string or a number): ``QuantityError`` if invalid."""
    if isinstance(value, bool) or value is None or not isinstance(value, str | int | float):
        raise QuantityError(ERR_FORMAT)
    q = parse(str(value).strip())
    return str(round_up(q) if milli else q)


def quantity_value(text: str | int | float) -> Decimal:
    """A Kubernetes quantity (``500m``, ``16Gi``, ``1e3``, ``2``) as a number, as the API server reads it;
    ValueError (a ``QuantityError``, with the real server's reason) when it is not one."""
    raw = str(text).strip()
    try:
        parsed = parse(raw)
    except QuantityError as error:
        raise QuantityError(f"{raw!r} is not a quantity: {error}") from None
    return Decimal(parsed.unscaled).scaleb(parsed.scale)


def format_quantity(value: Decimal) -> str:
    """A sum of quantities, written back: whole numbers as they are, fractions in milli-units rounded up."""
    if value == value.to_integral_value():
        return str(int(value))
    return f"{math.ceil(value * 1000)}m"
