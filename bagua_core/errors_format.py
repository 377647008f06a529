"""Turn pydantic validation errors into one readable message: ``field: message`` per line."""

from __future__ import annotations

from pydantic import ValidationError

__all__ = ["format_validation_error"]


def format_validation_error(error: ValidationError, what: str) -> str:
    lines = [f"invalid {what}:"]
    for item in error.errors():
        location = ".".join(str(part) for part in item.get("loc", ()))
        lines.append(f"  {location or '(top level)'}: {item.get('msg', 'invalid value')}")
    return "\n".join(lines)
