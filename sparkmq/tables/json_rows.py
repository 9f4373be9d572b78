"""A json table's rows: each body parsed into the declared columns, or rejected with the reason.

>>> good, rejects = parse_json_rows(_demo(), (("id", "bigint"),))
>>> good.column("id").to_pylist(), rejects.column("error").to_pylist()
([7], ["column id: expected bigint, got 'x'"])
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

import pyarrow as pa

from sparkmq.tables.layout import DLQ_SCHEMA, METADATA_COLUMNS, RAW_SCHEMA

_INTEGERS = {
    "tinyint": (pa.int8(), 7),
    "smallint": (pa.int16(), 15),
    "int": (pa.int32(), 31),
    "bigint": (pa.int64(), 63),
}
_SIMPLE: dict[str, pa.DataType] = {
    "string": pa.string(),
    "boolean": pa.bool_(),
    "float": pa.float32(),
    "double": pa.float64(),
    "date": pa.date32(),
    "timestamp": pa.timestamp("us", tz="UTC"),
    "binary": pa.binary(),
}


def arrow_type(spark_type: str) -> pa.DataType:
    """The Arrow type of an ``attributes.parse_ddl`` type (``decimal(p,s)`` included)."""
    if spark_type in _INTEGERS:
        return _INTEGERS[spark_type][0]
    if spark_type.startswith("decimal"):
        precision, _, scale = spark_type[len("decimal(") : -1].partition(",") if "(" in spark_type else ("10", "", "0")
        return pa.decimal128(int(precision), int(scale))
    return _SIMPLE[spark_type]


def _converter(name: str, spark_type: str) -> Callable[[Any], Any]:
    def bad(value: Any) -> ValueError:
        return ValueError(f"column {name}: expected {spark_type}, got {value!r}"[:300])

    def convert(value: Any) -> Any:
        if value is None:
            return None
        if spark_type in _INTEGERS:
            bits = _INTEGERS[spark_type][1]
            if isinstance(value, bool) or not isinstance(value, int) or not -(1 << bits) <= value < (1 << bits):
                raise bad(value)
            return value
        if spark_type == "string":
            return value if isinstance(value, str) else json.dumps(value)
        if spark_type == "boolean":
            if not isinstance(value, bool):
                raise bad(value)
            return value
        try:
            if spark_type in ("float", "double"):
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    raise bad(value)
                return float(value)
            if spark_type == "date":
                return date.fromisoformat(value)
            if spark_type == "timestamp":
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    return datetime.fromtimestamp(value / 1000, UTC)
                stamp = datetime.fromisoformat(value)
                return stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)
            if spark_type == "binary":
                return base64.b64decode(value, validate=True)
            return Decimal(str(value))
        except (TypeError, ValueError, ArithmeticError) as exc:
            raise bad(value) from exc

    return convert


def json_schema(columns: tuple[tuple[str, str], ...]) -> pa.Schema:
    """A json table's columns: the raw metadata columns, then the declared ones (all nullable)."""
    metadata = [RAW_SCHEMA.field(name) for name in METADATA_COLUMNS]
    return pa.schema(metadata + [pa.field(name, arrow_type(kind)) for name, kind in columns])


def parse_json_rows(rows: pa.Table, columns: tuple[tuple[str, str], ...]) -> tuple[pa.Table, pa.Table]:
    """``rows`` (raw schema) split into the parsed rows (:func:`json_schema`) and the rejects (``DLQ_SCHEMA``)."""
    converters = [(name, _converter(name, kind)) for name, kind in columns]
    values: list[list[Any]] = [[] for _ in columns]
    kept: list[int] = []
    rejected: list[int] = []
    errors: list[str] = []
    for index, body in enumerate(rows.column("body").to_pylist()):
        try:
            document = json.loads(body)
            if not isinstance(document, dict):
                raise ValueError(f"the body is a JSON {type(document).__name__}, not an object")
            parsed = [convert(document.get(name)) for name, convert in converters]
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:  # JSONDecodeError is a ValueError
            rejected.append(index)
            errors.append(str(exc)[:500])
            continue
        kept.append(index)
        for column, value in zip(values, parsed, strict=True):
            column.append(value)
    schema = json_schema(columns)
    good = rows.select(list(METADATA_COLUMNS)).take(pa.array(kept, pa.int64()))
    for (name, kind), column in zip(columns, values, strict=True):
        good = good.append_column(schema.field(name), pa.array(column, arrow_type(kind)))
    rejects = rows.take(pa.array(rejected, pa.int64())).append_column("error", pa.array(errors, pa.string()))
    return good, rejects.cast(DLQ_SCHEMA)


def _demo() -> pa.Table:
    rows = RAW_SCHEMA.empty_table().to_pylist() + [
        {"topic": "t", "queueId": 0, "queueOffset": 0, "body": b'{"id": 7}'},
        {"topic": "t", "queueId": 0, "queueOffset": 1, "body": b'{"id": "x"}'},
    ]
    return pa.Table.from_pylist(rows, RAW_SCHEMA)
