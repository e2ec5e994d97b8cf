"""Quantities as the PodGroup's minResources adds them up."""

from __future__ import annotations

from decimal import Decimal

import pytest

from kubedl_py.api.quantities import format_quantity, quantity_value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("2", Decimal(2)),
        (8, Decimal(8)),
        ("500m", Decimal("0.5")),
        ("1.5", Decimal("1.5")),
        ("16Gi", Decimal(16 * 2**30)),
        ("512Mi", Decimal(512 * 2**20)),
        ("1k", Decimal(1000)),
        ("1e3", Decimal(1000)),
        ("100u", Decimal("0.0001")),
        # Go's ParseQuantity reads a suffix with no digits as zero (k8s.io/apimachinery resource/quantity.go:
        # "if we stripped all numerator positions, always return 0"), so does the one parser here
        ("m", Decimal(0)),
        ("Gi", Decimal(0)),
    ],
)
def test_quantities_parse_to_their_value(text: str | int, value: Decimal) -> None:
    assert quantity_value(text) == value


# "1_000" and U+0661 (an Arabic-Indic one) are numbers to Decimal, not to the API server: refused as it refuses them
@pytest.mark.parametrize("text", ["lots", "", "1x", "nan", "inf", "1_000", "\u0661", "1.5.5", "5Gix"])
def test_what_is_not_a_quantity_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        quantity_value(text)


def test_sums_print_whole_numbers_plainly_and_fractions_in_milli_units_rounded_up() -> None:
    assert format_quantity(Decimal(3)) == "3"
    assert format_quantity(Decimal("2.5")) == "2500m"
    assert format_quantity(Decimal("0.0001")) == "1m"
