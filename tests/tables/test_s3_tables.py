"""Issue 32, object stores: a broker writes its tables under an ``s3://`` root on a real S3-compatible server
(moto's server mode on localhost, objects in memory), deltalake reads them back, and a store that stops
answering stalls the table, never the stream, until it answers again: then the table resumes exactly.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from sparkmq.broker.config import BrokerConfig
from sparkmq.errors import ConfigError
from sparkmq.tables.history import Held, held_offsets, read_offsets
from sparkmq.tables.layout import table_uri
from support.broker_wire import Wire
from support.s3_server import S3Server
from support.table_wire import (
    PROM,
    assert_exactly,
    complete,
    send_numbered,
    stalled,
    stalled_metric,
    table_broker,
    until,
    update_topic,
)


@pytest.fixture(scope="module")
def s3() -> Iterator[S3Server]:
    with S3Server.start() as server:
        yield server


def test_storage_options_are_key_value_pairs() -> None:
    config = BrokerConfig(table_topic_storage_options=" AWS_REGION=eu-west-1, AWS_ALLOW_HTTP=true ,")
    assert config.table_storage_options() == {"AWS_REGION": "eu-west-1", "AWS_ALLOW_HTTP": "true"}
    with pytest.raises(ConfigError, match="'AWS_REGION' is not key=value"):
        BrokerConfig(table_topic_storage_options="AWS_REGION")


def test_an_s3_root_holds_the_table_exactly_once_across_an_unreachable_store(tmp_path: Path, s3: S3Server) -> None:
    root = s3.root("unreachable")

    async def scenario(w: Wire) -> None:
        await update_topic(w, "orders", "+table.enable=true")
        await send_numbered(w, "orders", 0, 4)
        await until(w, "orders", complete(4))
        s3.pause()
        try:
            await send_numbered(w, "orders", 4, 4)  # the stream goes on while the store does not answer
            halted = await until(w, "orders", stalled("S3"))
            assert halted.uri == table_uri(root, "orders")
            value, reason = await stalled_metric(w, "orders")
            assert value == 1 and "S3" in reason
            await send_numbered(w, "orders", 8, 2)
        finally:
            s3.resume()
        await until(w, "orders", complete(10))
        assert (await stalled_metric(w, "orders"))[0] == 0

    table_broker(tmp_path, scenario, table_topic_root=root, table_topic_storage_options=s3.conf_value, **PROM)
    assert_exactly(table_uri(root, "orders"), 10, s3.options)


def test_the_history_reader_finds_an_s3_table_through_the_aws_environment(
    tmp_path: Path, s3: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``history=table``'s reader (``sparkmq.tables.history``) takes an s3:// ``tableRoot``; deltalake reads
    the endpoint and keys from the standard AWS_* variables, as a broker without tableTopicStorageOptions does."""
    for key, value in s3.options.items():
        if key.startswith("AWS_"):
            monkeypatch.setenv(key, value)
    root = s3.root("environment")

    async def scenario(w: Wire) -> None:
        await update_topic(w, "orders", "+table.enable=true")
        await send_numbered(w, "orders", 0, 6)
        await until(w, "orders", complete(6))

    table_broker(tmp_path, scenario, table_topic_root=root)
    uri = table_uri(root, "orders")
    assert held_offsets(uri, "orders", [0, 1]) == {0: Held(0, 3), 1: Held(0, 3)}
    batches = list(read_offsets(uri, "orders", "broker-a", 1, 0, 3, ("queueOffset", "body")))
    assert pa.Table.from_batches(batches).to_pylist() == [
        {"queueOffset": o, "body": f"m-{2 * o + 1}".encode()} for o in range(3)
    ]
