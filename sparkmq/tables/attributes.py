"""A topic's attributes (RocketMQ 5's ``TopicConfig.attributes``) and the table settings they hold.

The standard library only, so the broker validates ``updateTopic -a`` without pyarrow or deltalake.
A modification is RocketMQ 5's ``+key=value`` (add or replace) / ``-key`` (delete) list; entries are
separated by a comma followed by ``+`` or ``-``, so a ``table.schema`` DDL keeps its own commas.

>>> parse_modification("+table.enable=true,+table.schema=id BIGINT, name STRING")
{'+table.enable': 'true', '+table.schema': 'id BIGINT, name STRING'}
>>> alter(False, {"table.enable": "true"}, parse_modification("-table.enable,+table.format=raw"))
{'table.format': 'raw'}
>>> TableSettings.of({"table.enable": "true", "table.schema": "id BIGINT"}).columns
(('id', 'bigint'),)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from sparkmq.errors import InvalidFieldError

# The names are also in layout.py (which needs pyarrow); tests/tables/test_attributes.py keeps them equal.
ENABLE = "table.enable"
FORMAT = "table.format"
SCHEMA = "table.schema"
PARTITION_BY = "table.partitionBy"
MESSAGE_TYPE = "message.type"  # RocketMQ 5's TopicAttributes: the message types the topic accepts (docs/grpc.md)
MESSAGE_TYPES = ("NORMAL", "FIFO", "DELAY", "TRANSACTION", "MIXED")
NAMES = (ENABLE, FORMAT, SCHEMA, PARTITION_BY, MESSAGE_TYPE)
STORE_DATE = "date(storeTimestamp)"
_ENTRY_SEPARATOR = re.compile(r",(?=[+-])")
_COLUMN = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s+([A-Za-z]+(?:\(\s*\d+\s*,\s*\d+\s*\))?)\s*")
# Spark DDL type names a json table's declared columns may use (lower case, aliases folded).
SPARK_TYPES = {
    "string": "string",
    "varchar": "string",
    "boolean": "boolean",
    "tinyint": "tinyint",
    "byte": "tinyint",
    "smallint": "smallint",
    "short": "smallint",
    "int": "int",
    "integer": "int",
    "bigint": "bigint",
    "long": "bigint",
    "float": "float",
    "real": "float",
    "double": "double",
    "date": "date",
    "timestamp": "timestamp",
    "binary": "binary",
    "decimal": "decimal",
}


def _bad(message: str) -> InvalidFieldError:
    return InvalidFieldError(message, field="attributes")


def parse_modification(text: str | None) -> dict[str, str]:
    """``AttributeParser.parseToMap``, keys kept with their sign: ``{"+k": "v", "-k": ""}``."""
    if not text:
        return {}
    parsed: dict[str, str] = {}
    for entry in _ENTRY_SEPARATOR.split(text):
        key, _, value = entry.partition("=")
        key = key.strip()
        if key[:1] not in ("+", "-") or len(key) < 2:
            raise _bad(f"wrong format attribute {entry!r}: expected +key=value or -key")
        if key[0] == "+" and not value:
            raise _bad(f"attribute {key[1:]} needs a value: +{key[1:]}=value")
        if key[1:] in {k[1:] for k in parsed}:
            raise _bad(f"alter duplication key. key: {key[1:]}")
        parsed[key] = value if key[0] == "+" else ""
    return parsed


def render_modification(attributes: Mapping[str, str]) -> str:
    """The ``+key=value,...`` text that sets ``attributes`` (``AttributeParser.parseToString``)."""
    return ",".join(f"+{key}={value}" for key, value in attributes.items())


def alter(create: bool, current: Mapping[str, str], modification: Mapping[str, str]) -> dict[str, str]:
    """``AttributeUtil.alterCurrentAttributes``: the attributes after ``modification``, validated.

    Raises :class:`InvalidFieldError` (the remark names the key) for an unknown key, a delete on
    create or of a missing key, or a value :func:`TableSettings.of` refuses.
    """
    result = dict(current)
    for signed, value in modification.items():
        key = signed[1:]
        if key not in NAMES:
            raise _bad(f"unsupported key: {key} (topic attributes: {', '.join(NAMES)})")
        if signed[0] == "+":
            result[key] = value
        elif create:
            raise _bad(f"only add attribute is supported while creating topic. key: {key}")
        elif key not in current:
            raise _bad(f"attempt to delete a nonexistent key: {key}")
        else:
            del result[key]
    if result.get(MESSAGE_TYPE, "NORMAL") not in MESSAGE_TYPES:
        raise _bad(f"bad {MESSAGE_TYPE} value {result[MESSAGE_TYPE]!r}: expected one of {', '.join(MESSAGE_TYPES)}")
    TableSettings.of(result)
    return result


def parse_ddl(ddl: str) -> tuple[tuple[str, str], ...]:
    """``"id BIGINT, name STRING"`` as ``(("id", "bigint"), ("name", "string"))``; InvalidFieldError if bad."""
    columns: list[tuple[str, str]] = []
    for part in _split_top_level(ddl):
        match = _COLUMN.fullmatch(part)
        if match is None:
            raise _bad(f"bad {SCHEMA} column {part.strip()!r}: expected 'name TYPE'")
        name, kind = match.group(1), match.group(2).lower()
        base = kind.split("(")[0]
        if base not in SPARK_TYPES:
            raise _bad(f"bad {SCHEMA}: unsupported type {match.group(2)!r} of column {name}")
        if name in {c for c, _ in columns}:
            raise _bad(f"bad {SCHEMA}: column {name} declared twice")
        columns.append((name, SPARK_TYPES[base] + kind[len(base) :].replace(" ", "")))
    if not columns:
        raise _bad(f"bad {SCHEMA}: no columns")
    return tuple(columns)


def _split_top_level(ddl: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for at, char in enumerate(ddl):
        depth += (char == "(") - (char == ")")
        if char == "," and depth == 0:
            parts.append(ddl[start:at])
            start = at + 1
    parts.append(ddl[start:])
    return parts


@dataclass(frozen=True)
class TableSettings:
    """What a topic's attributes ask of its table."""

    enabled: bool = False
    format: str = "raw"
    columns: tuple[tuple[str, str], ...] = ()  # the json format's declared (name, Spark type) columns
    partition_by: str | None = None

    @classmethod
    def of(cls, attributes: Mapping[str, str]) -> TableSettings:
        """The settings of ``attributes``; InvalidFieldError naming the attribute for a bad value."""
        enable = attributes.get(ENABLE, "false").lower()
        if enable not in ("true", "false"):
            raise _bad(f"bad {ENABLE} value {attributes[ENABLE]!r}: expected true or false")
        kind = attributes.get(FORMAT, "raw")
        if kind not in ("raw", "json"):
            raise _bad(f"bad {FORMAT} value {kind!r}: expected raw or json")
        columns = parse_ddl(attributes[SCHEMA]) if SCHEMA in attributes else ()
        if kind == "json" and not columns:
            raise _bad(f"{FORMAT}=json needs {SCHEMA}=<DDL>, e.g. +{SCHEMA}=id BIGINT, name STRING")
        partition = attributes.get(PARTITION_BY)
        if partition is not None and partition != STORE_DATE:
            allowed = {"topic", "queueId", "tags", "keys"} | {name for name, _ in columns}
            if partition not in allowed:
                raise _bad(f"bad {PARTITION_BY} value {partition!r}: expected {STORE_DATE} or one of {sorted(allowed)}")
        return cls(enable == "true", kind, columns, partition)


__all__ = [
    "ENABLE",
    "FORMAT",
    "NAMES",
    "PARTITION_BY",
    "SCHEMA",
    "STORE_DATE",
    "TableSettings",
    "alter",
    "parse_ddl",
    "parse_modification",
    "render_modification",
]
