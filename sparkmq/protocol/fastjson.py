"""JSON the way RocketMQ's Java side (fastjson) reads and writes it, plus typed field readers.

fastjson writes two things standard JSON cannot hold, and :func:`loads` accepts both:

* integer map keys unquoted: ``{"brokerAddrs":{0:"127.0.0.1:10911"}}`` (a Java 4.9.7
  NameServer answers old clients this way);
* object map keys: ``{"offsetTable":{{"brokerName":"b","queueId":0,"topic":"T"}:{...}}}``
  (``HashMap<MessageQueue, ...>`` in TopicStatsTable, ConsumeStats, ResetOffsetBody).

Both are turned into string keys (``"0"``, and the key object's own JSON text, which
:func:`loads` parses again when a body wants it). :func:`object_keyed_map` writes the second
form by hand. Readers (:func:`get_str`, :func:`get_int`, ...) raise
:class:`~sparkmq.errors.InvalidFieldError` naming the JSON path.

Example::

    >>> loads(b'{"brokerAddrs":{0:"a:1"},"t":{{"q":0}:5}}', what="demo")
    {'brokerAddrs': {'0': 'a:1'}, 't': {'{"q":0}': 5}}
    >>> object_keyed_map([({"queueId": 0}, 7)])
    '{{"queueId":0}:7}'
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable
from typing import Any, TypeVar

from sparkmq.errors import InvalidFieldError

from .scalars import is_java_integer, java_integer
from .wire_text import quote, text_defect

_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_STRUCTURAL = re.compile(r'["{}\[\],]')
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BARE_TOKEN = re.compile(r"[A-Za-z0-9_$.+-]+")
_REQUIRED: Any = object()
E = TypeVar("E", bound=enum.Enum)


def dumps(value: object) -> str:
    """Compact JSON with raw UTF-8 text (fastjson writes UTF-8, not ``\\u`` escapes)."""
    return _dumps(value)


def object_keyed_map(entries: Iterable[tuple[object, object]]) -> str:
    """fastjson's text for a map whose keys are objects: ``{{key-json}:value-json,...}``."""
    return "{" + ",".join(f"{_dumps(k)}:{_dumps(v)}" for k, v in entries) + "}"


def loads(data: bytes | bytearray | memoryview | str, *, what: str) -> Any:
    """Parse a JSON body, tolerating fastjson's unquoted and object map keys.

    ``what`` names the body in errors (it becomes the error's ``field``).
    """
    if isinstance(data, str):
        text = data
    else:
        try:
            text = bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidFieldError(f"{what} body is not UTF-8: {exc}", field=what) from exc
    try:
        value = json.loads(text)
    except RecursionError as exc:
        raise InvalidFieldError(f"{what} body nests too deeply", field=what) from exc
    except ValueError:
        try:  # standard JSON failed: try again with fastjson's map keys quoted
            value = json.loads(quote_map_keys(text))
        except (ValueError, RecursionError) as exc:
            raise InvalidFieldError(f"{what} body is not JSON: {exc}", field=what) from exc
    if "\\u" in text:  # only a \u escape can yield a lone surrogate or a NUL: refuse both
        _check_strings(value, what)
    return value


def _check_strings(value: object, path: str) -> None:
    stack = [(value, path)]
    while stack:
        item, where = stack.pop()
        if isinstance(item, str):
            problem = text_defect(item, max_chars=None)  # a body may be long: the frame bounds it
            if problem is not None:
                raise InvalidFieldError(f"{where} {problem}", field=where)
        elif isinstance(item, dict):
            for key, member in item.items():
                stack += [(key, f"{where} key {quote(key)}"), (member, f"{where}.{quote(key)}")]
        elif isinstance(item, list):
            stack += [(member, f"{where}[{i}]") for i, member in enumerate(item)]


def quote_map_keys(text: str) -> str:
    """Rewrite fastjson's bare (``0``) and object (``{...}``) map keys as JSON strings."""
    out: list[str] = []
    stack: list[str] = []
    position, expect_key = 0, False
    while position < len(text):
        if expect_key:
            expect_key = False
            start = _after_whitespace(text, position)
            end = _nonstandard_key_end(text, start)
            if end is not None:
                out += [text[position:start], _dumps(text[start:end])]
                position = end
                continue
        match = _STRUCTURAL.search(text, position)
        if match is None:
            out.append(text[position:])
            break
        at, char = match.start(), match.group()
        if char == '"':
            end = _string_end(text, at)
            out.append(text[position:end])
            position = end
            continue
        out.append(text[position : at + 1])
        position = at + 1
        if char in "{[":
            stack.append(char)
            expect_key = char == "{"
        elif char in "}]":
            if stack:
                stack.pop()
        else:  # ","
            expect_key = bool(stack) and stack[-1] == "{"
    return "".join(out)


def _after_whitespace(text: str, position: int) -> int:
    while position < len(text) and text[position] in " \t\r\n":
        position += 1
    return position


def _string_end(text: str, at: int) -> int:
    match = _STRING.match(text, at)
    return len(text) if match is None else match.end()  # unterminated: let json.loads report it


def _nonstandard_key_end(text: str, start: int) -> int | None:
    if start >= len(text):
        return None
    if text[start] in "{[":
        end = _balanced_end(text, start)
    else:
        token = _BARE_TOKEN.match(text, start)
        if token is None:
            return None
        end = token.end()
    colon = _after_whitespace(text, end)
    return end if colon < len(text) and text[colon] == ":" else None


def _balanced_end(text: str, start: int) -> int:
    depth, position = 0, start
    while (match := _STRUCTURAL.search(text, position)) is not None:
        at, char = match.start(), match.group()
        if char == '"':
            position = _string_end(text, at)
            continue
        position = at + 1
        if char in "{[":
            depth += 1
        elif char in "}]":
            depth -= 1
            if depth == 0:
                return position
    return len(text)


# --- typed readers ---------------------------------------------------------------------------


def _bad(path: str, expected: str, value: object) -> InvalidFieldError:
    return InvalidFieldError(f"{path} is not {expected}: {str(value)[:40]!r}", field=path)


def as_object(value: object, path: str) -> dict[str, Any]:
    """``value`` if it is a JSON object, else an error naming ``path``."""
    if not isinstance(value, dict):
        raise _bad(path, "a JSON object", value)
    return value


def as_list(value: object, path: str) -> list[Any]:
    """``value`` if it is a JSON array; None (an absent or null set) gives ``[]``."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise _bad(path, "a JSON array", value)
    return value


def as_str_list(value: object, path: str) -> tuple[str, ...]:
    """A JSON array of strings (absent or null gives ``()``)."""
    items = as_list(value, path)
    for i, item in enumerate(items):
        if not isinstance(item, str):
            raise _bad(f"{path}[{i}]", "a string", item)
    return tuple(items)


def _lookup(obj: dict[str, Any], key: str, path: str, default: Any) -> Any:
    value = obj.get(key)
    if value is None and default is _REQUIRED:
        raise InvalidFieldError(f"{path}.{key} is missing", field=f"{path}.{key}")
    return value


def get_str(obj: dict[str, Any], key: str, path: str, default: Any = _REQUIRED) -> Any:
    """A string member; numbers are accepted as their decimal text (fastjson coerces too)."""
    value = _lookup(obj, key, path, default)
    if value is None:
        return default
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    raise _bad(f"{path}.{key}", "a string", value)


def as_int(value: object, path: str) -> int:
    """A JSON integer, or a string of one (C++ sends ``subVersion`` as a string)."""
    if isinstance(value, str) and is_java_integer(value):
        return java_integer(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise _bad(path, "an integer", value)
    return value


def get_int(obj: dict[str, Any], key: str, path: str, default: Any = _REQUIRED) -> Any:
    """An integer member (see :func:`as_int`); ``default`` when absent or null."""
    value = _lookup(obj, key, path, default)
    return default if value is None else as_int(value, f"{path}.{key}")


def get_float(obj: dict[str, Any], key: str, path: str, default: Any = _REQUIRED) -> Any:
    """A number member as float (``consumeTps``)."""
    value = _lookup(obj, key, path, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise _bad(f"{path}.{key}", "a number", value)
    return float(value)


def get_bool(obj: dict[str, Any], key: str, path: str, default: Any = _REQUIRED) -> Any:
    """A boolean member: JSON true/false, 0/1, or the strings "true"/"false"/"1"/"0"."""
    value = _lookup(obj, key, path, default)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0"):
        return value.lower() in ("true", "1")
    raise _bad(f"{path}.{key}", "a boolean", value)


def get_enum(obj: dict[str, Any], key: str, path: str, enum_type: type[E], default: Any = _REQUIRED) -> Any:
    """A Java enum member written as its ordinal (C++) or its name (Java, ali-ons)."""
    value = _lookup(obj, key, path, default)
    if value is None:
        return default
    try:
        if isinstance(value, str) and not is_java_integer(value):
            return enum_type[value]
        return enum_type(as_int(value, f"{path}.{key}"))
    except (KeyError, ValueError) as exc:
        raise _bad(f"{path}.{key}", f"a {enum_type.__name__}", value) from exc


__all__ = [
    "as_int",
    "as_list",
    "as_object",
    "as_str_list",
    "dumps",
    "get_bool",
    "get_enum",
    "get_float",
    "get_int",
    "get_str",
    "loads",
    "object_keyed_map",
    "quote_map_keys",
]
