"""What a topic's table looks like: its place, its columns and its exactly-once markers.

The one contract between the broker's materializer (which writes the table) and the readers (the
Spark source's ``history=table``, ``sparkmq admin tableStatus``): a table is written with one Delta
application transaction per (topic, queue), whose version is the next queue offset to write, so a
reader knows exactly which offsets a table holds without scanning it.

>>> app_id("orders", 3)
'sparkmq:orders:3'
>>> table_uri("memory:///tables", "orders"), table_uri("/data/tables/", "orders")
('memory:///tables/orders', '/data/tables/orders')
>>> dlq_topic("orders")
'orders__dlq'
"""

from __future__ import annotations

import pyarrow as pa

from sparkmq.connector.columns import arrow_schema, source_columns

# Topic attributes (RocketMQ 5's `updateTopic -a +name=value` syntax) that control a topic's table.
TABLE_ENABLE = "table.enable"  # "true" | "false"
TABLE_FORMAT = "table.format"  # "raw" | "json"
TABLE_SCHEMA = "table.schema"  # Spark DDL of the parsed body columns (json format)
TABLE_PARTITION_BY = "table.partitionBy"  # a column name or "date(storeTimestamp)"
TABLE_ATTRIBUTES = (TABLE_ENABLE, TABLE_FORMAT, TABLE_SCHEMA, TABLE_PARTITION_BY)
FORMATS = ("raw", "json")
STORE_DATE_PARTITION = "date(storeTimestamp)"
STORE_DATE_COLUMN = "storeDate"  # the column a `date(storeTimestamp)` partitioning adds

# A raw table holds the Spark source's lean columns and the properties map; a json table holds the
# same columns but `body` and `properties`, followed by the declared schema's columns.
RAW_COLUMNS = source_columns(include_properties=True)
RAW_SCHEMA: pa.Schema = arrow_schema(RAW_COLUMNS)
METADATA_COLUMNS = tuple(name for name in RAW_COLUMNS if name not in ("body", "properties"))
# A json table's rejects land in `<topic>__dlq`: the raw columns and the parse error.
DLQ_SCHEMA: pa.Schema = RAW_SCHEMA.append(pa.field("error", pa.string()))


def app_id(topic: str, queue_id: int) -> str:
    """The Delta application id whose transaction version is the next offset of ``topic``'s queue."""
    return f"sparkmq:{topic}:{queue_id}"


def table_uri(root: str, topic: str) -> str:
    """``<tableTopicRoot>/<topic>`` for a local path or an object-store / ``memory://`` URL."""
    return f"{root.rstrip('/')}/{topic}"


def dlq_topic(topic: str) -> str:
    return f"{topic}__dlq"


__all__ = [
    "DLQ_SCHEMA",
    "FORMATS",
    "METADATA_COLUMNS",
    "RAW_COLUMNS",
    "RAW_SCHEMA",
    "STORE_DATE_COLUMN",
    "STORE_DATE_PARTITION",
    "TABLE_ATTRIBUTES",
    "TABLE_ENABLE",
    "TABLE_FORMAT",
    "TABLE_PARTITION_BY",
    "TABLE_SCHEMA",
    "app_id",
    "dlq_topic",
    "table_uri",
]
