"""Turn pydantic validation errors into one readable message: ``field: message`` per line."""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import ValidationError

__all__ = ["format_validation_error"]


def format_validation_error(error: ValidationError, what: str, prefix: str = "", drop: int = 0,
                            allowed: Iterable[str] = ()) -> str:
    """``invalid {what}:`` and one ``{prefix}field: message`` line per error. ``drop`` leading parts of
    each location are left out (a discriminated union's tag); ``allowed`` field names are listed after
    an unknown field, so the line says what to write instead."""
    allowed = sorted(allowed)
    lines = [f"invalid {what}:"]
    for item in error.errors():
        location = prefix + ".".join(str(part) for part in item.get("loc", ())[drop:])
        message = item.get("msg", "invalid value")
        if item.get("type") == "extra_forbidden" and allowed:
            message = f"{message} (unknown field; allowed: {', '.join(allowed)})"
        lines.append(f"  {location or '(top level)'}: {message}")
    return "\n".join(lines)
