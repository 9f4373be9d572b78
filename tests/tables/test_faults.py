"""Faults of the table's side: the broker keeps serving the stream, reports the table stalled with the reason,
and resumes where it stopped once the cause is gone, with nothing lost or written twice."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from sparkmq.tables.layout import RAW_SCHEMA, app_id
from support.broker_wire import Wire
from support.table_wire import caught_up, rows, table_broker, until, update_topic


async def _send(w: Wire, topic: str, first: int, count: int) -> None:
    for i in range(first, first + count):
        await w.send_ok(topic, f"m-{i}".encode(), queue_id=i % 2)


def _stalled(reason: str):  # noqa: ANN202
    return lambda s: s.state == "stalled" and reason in s.reason


def _complete(total: int):  # noqa: ANN202
    return lambda s: caught_up(s) and sum(q.max_offset for q in s.queues) == total


def _assert_exactly(path: Path, total: int) -> None:
    found = rows(path, ["queueId", "queueOffset", "body"])
    keys = [(r["queueId"], r["queueOffset"]) for r in found]
    assert len(keys) == len(set(keys)) == total
    assert sorted(r["body"] for r in found) == sorted(f"m-{i}".encode() for i in range(total))


def test_an_unwritable_root_stalls_the_table_not_the_stream_and_it_resumes(tmp_path: Path) -> None:
    blocker = tmp_path / "tables"
    blocker.write_text("a file where the root directory should be: every write under it fails")

    async def scenario(w: Wire) -> None:
        await update_topic(w, "orders", "+table.enable=true")
        await _send(w, "orders", 0, 6)
        stalled = await until(w, "orders", _stalled("tables"))
        assert [q.table_offset for q in stalled.queues] == [-1, -1]  # not known while the table cannot be read
        await _send(w, "orders", 6, 4)  # the stream goes on meanwhile
        blocker.unlink()
        await until(w, "orders", _complete(10))

    table_broker(tmp_path, scenario)
    _assert_exactly(tmp_path / "tables" / "orders", 10)


def test_a_corrupt_delta_log_stalls_the_table_and_it_resumes_once_repaired(tmp_path: Path) -> None:
    table = tmp_path / "tables" / "orders"

    async def scenario(w: Wire) -> None:
        await update_topic(w, "orders", "+table.enable=true")
        await _send(w, "orders", 0, 4)
        done = await until(w, "orders", _complete(4))
        corrupt = table / "_delta_log" / f"{done.table_version + 1:020d}.json"
        corrupt.write_text('{"add": {"path": "nope", "size": ')
        await _send(w, "orders", 4, 4)
        await until(w, "orders", lambda s: s.state == "stalled" and s.reason != "")
        corrupt.unlink()
        await until(w, "orders", _complete(8))

    table_broker(tmp_path, scenario)
    _assert_exactly(table, 8)


def test_a_table_overwritten_by_someone_else_stalls_until_it_is_restored(tmp_path: Path) -> None:
    table = tmp_path / "tables" / "orders"

    async def scenario(w: Wire) -> None:
        await update_topic(w, "orders", "+table.enable=true")
        await _send(w, "orders", 0, 4)
        done = await until(w, "orders", _complete(4))
        foreign = pa.table({"something": pa.array(["else"])})
        write_deltalake(str(table), foreign, mode="overwrite", schema_mode="overwrite")
        await _send(w, "orders", 4, 4)
        stalled = await until(w, "orders", lambda s: s.state == "stalled")
        assert stalled.reason
        DeltaTable(str(table)).restore(done.table_version)
        await until(w, "orders", _complete(8))

    table_broker(tmp_path, scenario)
    _assert_exactly(table, 8)


def test_a_deleted_table_is_written_again_from_the_queues(tmp_path: Path) -> None:
    table = tmp_path / "tables" / "orders"

    async def scenario(w: Wire) -> None:
        await update_topic(w, "orders", "+table.enable=true")
        await _send(w, "orders", 0, 4)
        await until(w, "orders", _complete(4))
        shutil.rmtree(table)
        await _send(w, "orders", 4, 2)
        await until(w, "orders", lambda s: _complete(6)(s) and (table / "_delta_log").exists())

    table_broker(tmp_path, scenario)
    _assert_exactly(table, 6)


def test_a_foreign_transaction_past_the_queue_stalls_until_the_table_is_removed(tmp_path: Path) -> None:
    table = tmp_path / "tables" / "orders"

    async def scenario(w: Wire) -> None:
        await update_topic(w, "orders", "+table.enable=true")
        await _send(w, "orders", 0, 4)
        await until(w, "orders", _complete(4))
        claim = CommitProperties(app_transactions=[Transaction(app_id("orders", 0), 1000)])
        write_deltalake(str(table), RAW_SCHEMA.empty_table(), mode="append", commit_properties=claim)
        await _send(w, "orders", 4, 2)
        await until(w, "orders", _stalled("past the queue's max offset"))
        shutil.rmtree(table)  # a RESTORE keeps the claim (transactions outlive it): only a new table clears it
        await until(w, "orders", lambda s: _complete(6)(s) and (table / "_delta_log").exists())

    table_broker(tmp_path, scenario)
    _assert_exactly(table, 6)
