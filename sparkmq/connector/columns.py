"""The source's columns: their names, Arrow types and Spark DDL (lean default, properties, wide).

Apart from :mod:`.arrow` (the record decoding) so that parsing options and answering Spark's
``schema()`` import neither pyarrow nor the record codecs: Spark's per-query source runner and its
data source lookups parse the options of every query.

>>> source_columns(include_properties=True)[7:9]
('body', 'properties')
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

_DDL: dict[str, str] = {  # column → Spark DDL type (its Arrow type: arrow_schema)
    "topic": "string",
    "brokerName": "string",
    "queueId": "int",
    "queueOffset": "long",
    "commitLogOffset": "long",
    "msgId": "string",
    "keys": "string",
    "tags": "string",
    "body": "binary",
    "properties": "map<string,string>",
    "bornTimestamp": "timestamp",
    "storeTimestamp": "timestamp",
    "bornHost": "string",
    "storeHost": "string",
    "reconsumeTimes": "int",
}
WIDE_COLUMNS = tuple(_DDL)  # wideSchema=true: every stored field
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
    import pyarrow as pa

    types = {
        "string": pa.string(),
        "int": pa.int32(),
        "long": pa.int64(),
        "binary": pa.binary(),
        "map<string,string>": pa.map_(pa.string(), pa.string()),
        "timestamp": pa.timestamp("us", tz="UTC"),
    }
    return pa.schema([pa.field(name, types[_DDL[name]]) for name in columns])


def schema_ddl(columns: tuple[str, ...]) -> str:
    return ", ".join(f"{name} {_DDL[name]}" for name in columns)


SCHEMA_DDL = schema_ddl(LEAN_COLUMNS)


__all__ = [
    "LEAN_COLUMNS",
    "SCHEMA_DDL",
    "WIDE_COLUMNS",
    "arrow_schema",
    "schema_ddl",
    "source_columns",
]
