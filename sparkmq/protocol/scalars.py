"""Scalar conversions shared by the header and body codecs.

RocketMQ's extFields are ``HashMap<String, String>`` in Java, yet real clients put JSON numbers
and booleans there (C++ 1.2.3 and ali-ons). Everything is normalised to strings once, on decode
(:func:`ext_value`), and parsed into typed values by the header schemas with Java's rules
(:func:`parse_int`, :func:`parse_bool`), which raise :class:`InvalidFieldError` naming the field.

Example::

    >>> ext_value("k", False), ext_value("d", 4), parse_bool("1", "batch")
    ('false', '4', True)
"""

from __future__ import annotations

import math
import re

from sparkmq.errors import InvalidFieldError, ProtocolError

from .codes import INT32_MAX, INT32_MIN, INT64_MAX, INT64_MIN

# Java's Integer.parseInt / Long.parseLong syntax: optional sign, ASCII digits only.
# (Python's int() would also take spaces, underscores and non-ASCII digits.)
_JAVA_INTEGER = re.compile(r"[+-]?[0-9]+")

# Java writes Boolean.toString ("true"/"false"); C++ 1.2.3 writes "1"/"0" (an ostream without
# boolalpha). Java's parseBoolean("1") is false, which loses C++ batches; we accept both.
_TRUE = frozenset({"true", "1"})
_FALSE = frozenset({"false", "0"})


def ext_value(key: str, value: object) -> str | None:
    """Normalise one decoded JSON extFields value to the string Java would hold, or None.

    Strings pass through; booleans become ``"true"``/``"false"`` (Java's ``Boolean.toString``);
    integers their decimal form; an integral float (``4.0``, ``1e3``) its integer form; JSON
    ``null`` gives None (the key is then dropped, as ali-ons drops nulls itself). Objects and
    arrays are not headers and raise :class:`ProtocolError`.
    """
    if isinstance(value, str):
        return value
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ProtocolError(f"extFields value for {key!r} is not a finite number: {value!r}")
        return str(int(value)) if value.is_integer() else repr(value)
    if value is None:
        return None
    raise ProtocolError(f"extFields value for {key!r} is a JSON {type(value).__name__}, not a scalar")


#: int64 needs 19 significant digits; a longer literal is out of every range we parse. Checked
#: before ``int()``, which refuses more than 4,300 digits with a ValueError (CVE-2020-10735).
MAX_SIGNIFICANT_DIGITS = 19
_OUT_OF_RANGE: int = 10**MAX_SIGNIFICANT_DIGITS


def is_java_integer(raw: str) -> bool:
    """Whether ``raw`` has the syntax Java's ``Integer.parseInt``/``Long.parseLong`` accept."""
    return _JAVA_INTEGER.fullmatch(raw) is not None


def java_integer(raw: str) -> int:
    """The value of a literal :func:`is_java_integer` accepted, never raising for its length.

    A literal with more than :data:`MAX_SIGNIFICANT_DIGITS` significant digits gives a value
    just outside int64 (with its sign), so the caller's range check reports it.

    >>> java_integer("-007"), java_integer("9" * 5000) == 10**19
    (-7, True)
    """
    negative = raw.startswith("-")
    digits = raw.lstrip("+-").lstrip("0")
    if len(digits) > MAX_SIGNIFICANT_DIGITS:
        return -_OUT_OF_RANGE if negative else _OUT_OF_RANGE
    value = int(digits) if digits else 0
    return -value if negative else value


def parse_int(raw: str, field: str, *, bits: int = 64) -> int:
    """Parse a Java ``Integer`` (``bits=32``) or ``Long`` (``bits=64``) header value.

    >>> parse_int("-1", "commitOffset")
    -1
    """
    if _JAVA_INTEGER.fullmatch(raw) is None:
        raise InvalidFieldError(f"header field {field!r} is not an integer: {raw[:40]!r}", field=field)
    value = java_integer(raw)
    low, high = (INT32_MIN, INT32_MAX) if bits == 32 else (INT64_MIN, INT64_MAX)
    if not low <= value <= high:
        raise InvalidFieldError(f"header field {field!r} is out of int{bits} range: {raw[:40]!r}", field=field)
    return value


def parse_bool(raw: str, field: str) -> bool:
    """Parse a header boolean: ``true``/``1`` and ``false``/``0``, case-insensitive.

    >>> parse_bool("TRUE", "order"), parse_bool("0", "unitMode")
    (True, False)
    """
    lowered = raw.lower()
    if lowered in _TRUE:
        return True
    if lowered in _FALSE:
        return False
    raise InvalidFieldError(f"header field {field!r} is not a boolean: {raw[:40]!r}", field=field)


def format_bool(value: bool) -> str:
    """Java's ``Boolean.toString``: what a Java peer writes and parses."""
    return "true" if value else "false"


__all__ = [
    "MAX_SIGNIFICANT_DIGITS",
    "ext_value",
    "format_bool",
    "is_java_integer",
    "java_integer",
    "parse_bool",
    "parse_int",
]
