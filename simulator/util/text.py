"""Text in and out: counts with their noun ("1 request", "1,000,000 requests"), a target share as a
percentage, and the items of a comma-separated option value. (Byte sizes:
:func:`simulator.config.resources.format_bytes`.)"""

from __future__ import annotations


def comma_list(text: str | None) -> tuple[str, ...]:
    """The items of a comma-separated option value, stripped, empty ones dropped (``"1, 2,,4"`` ->
    ``("1", "2", "4")``; None -> ``()``). Each option converts and validates its own items."""
    return tuple(item for item in (part.strip() for part in (text or "").split(",")) if item)


def plural(num: int | float, word: str, many: str | None = None) -> str:
    """``word`` for one, else ``many`` (default: ``word + "s"``)."""
    return word if num == 1 else (many or word + "s")


def count(num: int | float, word: str, many: str | None = None) -> str:
    """``num`` with thousands separators and its noun: ``count(1, "request") == "1 request"``,
    ``count(1_000_000, "request") == "1,000,000 requests"``."""
    shown = f"{int(num):,}" if float(num).is_integer() else f"{num:,.3g}"
    return f"{shown} {plural(num, word, many)}"


def percent(fraction: float) -> str:
    """A target share as a percentage with the digits it was given: ``0.9 -> "90%"``, ``0.999 -> "99.9%"``,
    never a rounded ``"100%"`` that reads as every request (``:.0%`` showed a 0.999 goodput target so)."""
    value = 100 * fraction
    text = f"{value:.3g}"
    for digits in range(3, 16):  # the fewest significant digits that give the value back
        text = f"{value:.{digits}g}"
        if abs(float(text) - value) <= 1e-9 * max(1.0, abs(value)):
            break
    return f"{text}%"
