"""Faults of the table's side: the broker keeps serving the stream, reports the table stalled with the reason,
and resumes where it stopped once the cause is gone, with nothing lost or written twice."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from sparkmq.tables.layout import RAW_SCHEMA, app_id
from support.broker_wire import Wire
from support.table_wire import caught_up, rows, table_broker, until, update_topic

Damage = Callable[[Path, int], object]  # (the table's directory, its version once complete)


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
        stalled = await until(w, "orders", lambda s: _stalled("tables")(s) and len(s.queues) == 2)
        assert [q.table_offset for q in stalled.queues] == [-1, -1]  # not known while the table cannot be read
        await _send(w, "orders", 6, 4)  # the stream goes on meanwhile
        blocker.unlink()
        await until(w, "orders", _complete(10))

    table_broker(tmp_path, scenario)
    _assert_exactly(tmp_path / "tables" / "orders", 10)


def _stalls_then_resumes(tmp_path: Path, damage: Damage, repair: Damage, reason: str = "") -> None:
    """Four messages in the table; ``damage`` it; four more sent while it stalls; ``repair``: all eight, once."""
    table = tmp_path / "tables" / "orders"

    async def scenario(w: Wire) -> None:
        await update_topic(w, "orders", "+table.enable=true")
        await _send(w, "orders", 0, 4)
        done = await until(w, "orders", _complete(4))
        damage(table, done.table_version)
        await _send(w, "orders", 4, 4)  # the stream goes on meanwhile
        await until(w, "orders", _stalled(reason))
        repair(table, done.table_version)
        await until(w, "orders", lambda s: _complete(8)(s) and (table / "_delta_log").exists())

    table_broker(tmp_path, scenario)
    _assert_exactly(table, 8)


def _next_log_entry(table: Path, version: int) -> Path:
    return table / "_delta_log" / f"{version + 1:020d}.json"


def test_a_corrupt_delta_log_stalls_the_table_and_it_resumes_once_repaired(tmp_path: Path) -> None:
    _stalls_then_resumes(
        tmp_path,
        lambda table, version: _next_log_entry(table, version).write_text('{"add": {"path": "nope", "size": '),
        lambda table, version: _next_log_entry(table, version).unlink(),
    )


def test_a_table_overwritten_by_someone_else_stalls_until_it_is_restored(tmp_path: Path) -> None:
    foreign = pa.table({"something": pa.array(["else"])})
    _stalls_then_resumes(
        tmp_path,
        lambda table, _: write_deltalake(str(table), foreign, mode="overwrite", schema_mode="overwrite"),
        lambda table, version: DeltaTable(str(table)).restore(version),
        "lacks the columns topic, brokerName, queueId, queueOffset",
    )


def test_a_foreign_transaction_past_the_queue_stalls_until_the_table_is_removed(tmp_path: Path) -> None:
    claim = CommitProperties(app_transactions=[Transaction(app_id("orders", 0), 1000)])
    _stalls_then_resumes(
        tmp_path,
        lambda table, _: write_deltalake(str(table), RAW_SCHEMA.empty_table(), mode="append", commit_properties=claim),
        lambda table, _: table.rename(table.with_name("removed")),  # a RESTORE keeps the claim
        "past the queue's max offset",
    )


def test_a_deleted_table_is_written_again_from_the_queues(tmp_path: Path) -> None:
    table = tmp_path / "tables" / "orders"

    async def scenario(w: Wire) -> None:
        await update_topic(w, "orders", "+table.enable=true")
        await _send(w, "orders", 0, 4)
        await until(w, "orders", _complete(4))
        table.rename(table.with_name("removed"))  # at once, as the writer may be writing it
        await _send(w, "orders", 4, 2)
        await until(w, "orders", lambda s: _complete(6)(s) and (table / "_delta_log").exists())

    table_broker(tmp_path, scenario)
    _assert_exactly(table, 6)
