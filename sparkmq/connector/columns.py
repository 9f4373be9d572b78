"""The source's columns: their names, Arrow types and Spark DDL (lean default, properties, wide).

Apart from :mod:`.arrow` (the record decoding) so that parsing options and answering Spark's
``schema()`` import pyarrow's types only, not the record codecs: Spark's per-query source runner
parses the options of every query.

>>> source_columns(include_properties=True)[7:9]
('body', 'properties')
"""

from __future__ import annotations

import pyarrow as pa

TIMESTAMP = pa.timestamp("us", tz="UTC")
_TYPES: dict[str, tuple[pa.DataType, str]] = {  # column → (Arrow type, Spark DDL type)
    "topic": (pa.string(), "string"),
    "brokerName": (pa.string(), "string"),
    "queueId": (pa.int32(), "int"),
    "queueOffset": (pa.int64(), "long"),
    "commitLogOffset": (pa.int64(), "long"),
    "msgId": (pa.string(), "string"),
    "keys": (pa.string(), "string"),
    "tags": (pa.string(), "string"),
    "body": (pa.binary(), "binary"),
    "properties": (pa.map_(pa.string(), pa.string()), "map<string,string>"),
    "bornTimestamp": (TIMESTAMP, "timestamp"),
    "storeTimestamp": (TIMESTAMP, "timestamp"),
    "bornHost": (pa.string(), "string"),
    "storeHost": (pa.string(), "string"),
    "reconsumeTimes": (pa.int32(), "int"),
}
WIDE_COLUMNS = tuple(_TYPES)  # wideSchema=true: every stored field
LEAN_COLUMNS = (
    "topic",
    "brokerName",
    "queueId",
    "queueOffset",
    "msgId",
    "keys",
    "tags",
    "body",
    "bornTimestamp",
    "storeTimestamp",
)  # the default, like Kafka's source; includeProperties=true adds the map


def source_columns(wide: bool = False, include_properties: bool = False) -> tuple[str, ...]:
    """The source's columns: the lean default (+ ``properties`` when asked) or the wide schema."""
    if wide:
        return WIDE_COLUMNS
    return LEAN_COLUMNS[:8] + ("properties",) + LEAN_COLUMNS[8:] if include_properties else LEAN_COLUMNS


def arrow_schema(columns: tuple[str, ...]) -> pa.Schema:
    return pa.schema([pa.field(name, _TYPES[name][0]) for name in columns])


def schema_ddl(columns: tuple[str, ...]) -> str:
    return ", ".join(f"{name} {_TYPES[name][1]}" for name in columns)


SCHEMA_DDL = schema_ddl(LEAN_COLUMNS)


__all__ = [
    "LEAN_COLUMNS",
    "SCHEMA_DDL",
    "TIMESTAMP",
    "WIDE_COLUMNS",
    "arrow_schema",
    "schema_ddl",
    "source_columns",
]
