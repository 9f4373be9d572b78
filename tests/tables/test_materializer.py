"""The table writer in an in-process broker: backfill, opt in and out, transactions, json and its rejects,
schema evolution, partitioning, status, metrics and retention."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from datetime import UTC
from pathlib import Path

from deltalake import DeltaTable
from prometheus_client.parser import text_string_to_metric_families

from sparkmq.protocol import RequestCode, ResponseCode
from support.broker_wire import Wire
from support.table_wire import caught_up, rows, status, table_broker, until, update_topic
from support.tx_wire import COMMIT, ROLLBACK, TxWire


def test_a_topic_that_opts_in_is_backfilled_then_followed_and_keeps_its_table_after_opting_out(tmp_path: Path) -> None:
    tables = tmp_path / "tables"

    async def scenario(w: Wire) -> None:
        await update_topic(w, "orders", None)
        for i in range(6):
            await w.send_ok("orders", f"old-{i}".encode(), queue_id=i % 2, props={"TAGS": "t", "k": str(i)})
        assert not (tables / "orders").exists()  # not table-enabled yet: nothing written
        await update_topic(w, "orders", "+table.enable=true")
        await until(w, "orders", caught_up)
        for i in range(6, 10):
            await w.send_ok("orders", f"new-{i}".encode(), queue_id=i % 2)
        done = await until(w, "orders", lambda s: caught_up(s) and sum(q.max_offset for q in s.queues) == 10)
        assert [(q.queue_id, q.table_offset, q.max_offset) for q in done.queues] == [(0, 5, 5), (1, 5, 5)]
        assert done.uri == str(tables / "orders")
        await update_topic(w, "orders", "-table.enable")
        gone = await w.call(RequestCode.SPARKMQ_TABLE_STATUS, {"topic": "orders"})
        assert gone.code == ResponseCode.SYSTEM_ERROR and "has no table" in (gone.remark or "")
        missing = await w.call(RequestCode.SPARKMQ_TABLE_STATUS, {"topic": "nope"})
        assert missing.code == ResponseCode.TOPIC_NOT_EXIST

    table_broker(tmp_path, scenario)
    found = rows(tables / "orders")
    assert [(r["queueId"], r["queueOffset"]) for r in found] == [(q, o) for q in (0, 1) for o in range(5)]
    bodies = {r["body"] for r in found}
    assert bodies == {f"old-{i}".encode() for i in range(6)} | {f"new-{i}".encode() for i in range(6, 10)}
    first = next(r for r in found if r["body"] == b"old-0")
    assert dict(first["properties"])["k"] == "0" and first["tags"] == "t" and first["topic"] == "orders"


def test_half_and_rolled_back_transactional_messages_never_reach_the_table(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await update_topic(w, "pay", "+table.enable=true", queues=4)
        async with TxWire(w.address, "PID_TX") as tx:
            committed = await tx.prepare("pay", b"committed")
            rolled_back = await tx.prepare("pay", b"rolled-back")
            await tx.prepare("pay", b"still-half")
            assert (await tx.end(committed, COMMIT)).code == ResponseCode.SUCCESS
            assert (await tx.end(rolled_back, ROLLBACK)).code == ResponseCode.SUCCESS
        await w.send_ok("pay", b"plain", queue_id=0)
        await until(w, "pay", lambda s: caught_up(s) and sum(q.max_offset for q in s.queues) == 2)

    table_broker(tmp_path, scenario)
    assert sorted(r["body"] for r in rows(tmp_path / "tables" / "pay")) == [b"committed", b"plain"]


def test_json_rows_parse_into_the_declared_columns_rejects_go_to_the_dlq_and_the_schema_evolves(tmp_path: Path) -> None:
    tables = tmp_path / "tables"

    async def scenario(w: Wire) -> None:
        await update_topic(w, "events", "+table.enable=true,+table.format=json,+table.schema=id BIGINT, name STRING")
        await w.send_ok("events", json.dumps({"id": 1, "name": "a", "extra": 5}).encode())
        await w.send_ok("events", b"not json")
        await w.send_ok("events", json.dumps({"id": "two"}).encode())
        await w.send_ok("events", json.dumps({"id": 3}).encode(), queue_id=1)
        await until(w, "events", lambda s: caught_up(s) and sum(q.max_offset for q in s.queues) == 4)
        await update_topic(
            w, "events", "+table.schema=id BIGINT, name STRING, price DOUBLE, day DATE,+table.partitionBy=queueId"
        )
        await w.send_ok("events", json.dumps({"id": 4, "price": 2.5, "day": "2026-01-02"}).encode())
        await until(w, "events", lambda s: caught_up(s) and sum(q.max_offset for q in s.queues) == 5)

    table_broker(tmp_path, scenario)
    good = rows(tables / "events")
    assert [(r["id"], r["name"], r.get("price")) for r in good] == [(1, "a", None), (4, None, 2.5), (3, None, None)]
    assert "body" not in good[0] and good[0]["topic"] == "events"
    rejects = rows(tables / "events__dlq")
    assert [(r["queueOffset"], r["body"]) for r in rejects] == [(1, b"not json"), (2, b'{"id": "two"}')]
    assert "Expecting value" in rejects[0]["error"] and "column id: expected bigint, got 'two'" in rejects[1]["error"]


def test_date_partitioning_adds_the_store_date(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await update_topic(w, "clicks", "+table.enable=true,+table.partitionBy=date(storeTimestamp)")
        await w.send_ok("clicks", b"x")
        await until(w, "clicks", lambda s: caught_up(s) and sum(q.max_offset for q in s.queues) == 1)

    table_broker(tmp_path, scenario)
    table = DeltaTable(str(tmp_path / "tables" / "clicks"))
    assert table.metadata().partition_columns == ["storeDate"]
    (row,) = table.to_pyarrow_table().to_pylist()
    assert row["storeDate"] == row["storeTimestamp"].astimezone(UTC).date()


def test_partitioning_asked_for_later_adds_the_column_without_a_stall(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await update_topic(w, "clicks", "+table.enable=true")
        await w.send_ok("clicks", b"before")
        await until(w, "clicks", lambda s: caught_up(s) and sum(q.max_offset for q in s.queues) == 1)
        await update_topic(w, "clicks", "+table.partitionBy=date(storeTimestamp)")
        await w.send_ok("clicks", b"after")
        await until(w, "clicks", lambda s: caught_up(s) and sum(q.max_offset for q in s.queues) == 2)

    table_broker(tmp_path, scenario)
    found = {r["body"]: r["storeDate"] for r in rows(tmp_path / "tables" / "clicks")}
    assert found[b"before"] is None and found[b"after"] is not None


def test_lag_and_state_are_in_the_metrics(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await update_topic(w, "orders", "+table.enable=true")
        await w.send_ok("orders", b"x")
        await until(w, "orders", lambda s: caught_up(s) and sum(q.max_offset for q in s.queues) == 1)
        assert w.broker.metrics is not None
        url = f"http://{w.broker.metrics.address}/metrics"
        text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
        samples = {
            (s.name, s.labels.get("topic"), s.labels.get("queue_id")): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
            if s.name.startswith("sparkmq_table")
        }
        assert samples[("sparkmq_table_lag_messages", "orders", "0")] == 0
        assert samples[("sparkmq_table_lag_seconds", "orders", "0")] == 0
        assert samples[("sparkmq_table_stalled", "orders", None)] == 0
        assert samples[("sparkmq_table_retention_held_segments", None, None)] == 0

    table_broker(
        tmp_path,
        scenario,
        metrics_exporter_type="PROM",
        metrics_prom_exporter_host="127.0.0.1",
        metrics_prom_exporter_port=0,
    )


def test_a_topics_json_edited_into_a_bad_attribute_costs_only_that_topic_its_table(tmp_path: Path) -> None:
    async def create(w: Wire) -> None:
        await update_topic(w, "broken", "+table.enable=true")
        await update_topic(w, "fine", "+table.enable=true")

    table_broker(tmp_path, create, table_topic_root="")  # no writer yet: it would create the tables at once
    path = tmp_path / "store" / "config" / "topics.json"
    stored = json.loads(path.read_text())
    stored["topicConfigTable"]["broken"]["attributes"]["table.format"] = "avro"
    path.write_text(json.dumps(stored))

    async def scenario(w: Wire) -> None:
        await w.send_ok("broken", b"x")
        await w.send_ok("fine", b"y")
        await until(w, "fine", lambda s: caught_up(s) and sum(q.max_offset for q in s.queues) == 1)
        refused = await w.call(RequestCode.SPARKMQ_TABLE_STATUS, {"topic": "broken"})
        assert refused.code == ResponseCode.SYSTEM_ERROR and "has no table" in (refused.remark or "")

    table_broker(tmp_path, scenario)
    assert not (tmp_path / "tables" / "broken").exists()


def test_a_json_table_and_its_dlq_are_each_written_again_once_when_one_is_removed(tmp_path: Path) -> None:
    tables = tmp_path / "tables"

    async def scenario(w: Wire) -> None:
        await update_topic(w, "events", "+table.enable=true,+table.format=json,+table.schema=id BIGINT")
        for body in (b'{"id": 1}', b"bad-1", b'{"id": 2}', b"bad-2"):
            await w.send_ok("events", body)
        for removed in ("events", "events__dlq"):
            await until(w, "events", lambda s: caught_up(s) and sum(q.max_offset for q in s.queues) == 4)
            (tables / removed).rename(tables / f"{removed}-removed")  # at once, as the writer may be writing
            await until(w, "events", lambda s, r=removed: caught_up(s) and (tables / r / "_delta_log").exists())

    table_broker(tmp_path, scenario)
    assert [r["id"] for r in rows(tables / "events")] == [1, 2]
    assert [r["body"] for r in rows(tables / "events__dlq")] == [b"bad-1", b"bad-2"]


def test_the_writer_compacts_and_vacuums_its_table_keeping_rows_and_queue_offsets(tmp_path: Path) -> None:
    table_dir = tmp_path / "tables" / "clicks"

    def files() -> tuple[int, int]:
        live = len(DeltaTable(str(table_dir)).file_uris())
        return live, len([p for p in table_dir.rglob("*.parquet") if "_delta_log" not in p.parts])  # not checkpoints

    async def scenario(w: Wire) -> None:
        await update_topic(w, "clicks", "+table.enable=true")
        for round_ in range(4):  # one commit per round at least: several small files
            for i in range(6):
                await w.send_ok("clicks", f"r{round_}-{i}".encode(), queue_id=i % 2)
            await until(
                w, "clicks", lambda s, n=6 * (round_ + 1): caught_up(s) and sum(q.max_offset for q in s.queues) == n
            )
        loop = asyncio.get_running_loop()
        deadline = loop.time() + 60
        while files() != (1, 1):  # compacted into one file, the replaced ones vacuumed from disk
            assert loop.time() < deadline, files()
            await asyncio.sleep(0.05)
        done = await status(w, "clicks")
        assert [(q.queue_id, q.table_offset) for q in done.queues] == [(0, 12), (1, 12)]

    table_broker(tmp_path, scenario, table_topic_compact_interval_ms=300, table_topic_vacuum_retention_hours=0)
    found = rows(table_dir)
    assert [(r["queueId"], r["queueOffset"]) for r in found] == [(q, o) for q in (0, 1) for o in range(12)]
    assert {r["body"] for r in found} == {f"r{k}-{i}".encode() for k in range(4) for i in range(6)}
    table = DeltaTable(str(table_dir))
    assert [table.transaction_version(f"sparkmq:clicks:{q}") for q in (0, 1)] == [12, 12]
    assert table.metadata().configuration["delta.checkpointInterval"] == "10"
    # the upkeep leaves a checkpoint, so a new reader's snapshot starts from it, not from every commit
    last = json.loads((table_dir / "_delta_log" / "_last_checkpoint").read_text())
    assert (table_dir / "_delta_log" / f"{last['version']:020d}.checkpoint.parquet").exists()
