"""The table contract shared by the materializer and its readers."""

from __future__ import annotations

import pyarrow as pa

from sparkmq.tables.layout import DLQ_SCHEMA, METADATA_COLUMNS, RAW_SCHEMA, app_id, table_uri


def test_raw_tables_hold_the_sources_lean_columns_and_properties() -> None:
    assert RAW_SCHEMA.names[:4] == ["topic", "brokerName", "queueId", "queueOffset"]
    assert RAW_SCHEMA.field("properties").type == pa.map_(pa.string(), pa.string())
    assert "body" not in METADATA_COLUMNS and "queueOffset" in METADATA_COLUMNS
    assert DLQ_SCHEMA.names[-1] == "error"


def test_each_queue_has_its_own_application_id_and_tables_sit_under_the_root() -> None:
    assert len({app_id("t", q) for q in range(8)}) == 8
    assert app_id("a:b", 1) != app_id("a", 1)
    assert table_uri("s3://bucket/root/", "orders") == "s3://bucket/root/orders"
