"""Faults of the table's side: the broker keeps serving the stream, reports the table stalled with the reason,
and resumes where it stopped once the cause is gone, with nothing lost or written twice."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

from sparkmq.tables.layout import RAW_SCHEMA, app_id
from support.broker_wire import Wire
from support.table_wire import (
    DEADLINE_S,
    assert_exactly,
    complete,
    send_numbered,
    stalled,
    table_broker,
    until,
    update_topic,
)

Damage = Callable[[Path, int], object]  # (the table's directory, its version once complete)


def test_an_unwritable_root_stalls_the_table_not_the_stream_and_it_resumes(tmp_path: Path) -> None:
    blocker = tmp_path / "tables"
    blocker.write_text("a file where the root directory should be: every write under it fails")

    async def scenario(w: Wire) -> None:
        await update_topic(w, "orders", "+table.enable=true")
        await send_numbered(w, "orders", 0, 6)
        halted = await until(w, "orders", lambda s: stalled("tables")(s) and len(s.queues) == 2)
        assert [q.table_offset for q in halted.queues] == [-1, -1]  # not known while the table cannot be read
        await send_numbered(w, "orders", 6, 4)  # the stream goes on meanwhile
        blocker.unlink()
        await until(w, "orders", complete(10))

    table_broker(tmp_path, scenario)
    assert_exactly(tmp_path / "tables" / "orders", 10)


def _stalls_then_resumes(tmp_path: Path, damage: Damage, repair: Damage, reason: str = "") -> None:
    """Four messages in the table; ``damage`` it; four more sent while it stalls; ``repair``: all eight, once."""
    table = tmp_path / "tables" / "orders"

    async def scenario(w: Wire) -> None:
        await update_topic(w, "orders", "+table.enable=true")
        await send_numbered(w, "orders", 0, 4)
        done = await until(w, "orders", complete(4))
        damage(table, done.table_version)
        await send_numbered(w, "orders", 4, 4)  # the stream goes on meanwhile
        await until(w, "orders", stalled(reason))
        repair(table, done.table_version)
        await until(w, "orders", lambda s: complete(8)(s) and (table / "_delta_log").exists())

    table_broker(tmp_path, scenario)
    assert_exactly(table, 8)


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
        await send_numbered(w, "orders", 0, 4)
        await until(w, "orders", complete(4))
        table.rename(table.with_name("removed"))  # at once, as the writer may be writing it
        await send_numbered(w, "orders", 4, 2)
        await until(w, "orders", lambda s: complete(6)(s) and (table / "_delta_log").exists())

    table_broker(tmp_path, scenario)
    assert_exactly(table, 6)


@contextmanager
def _small_filesystem(path: Path, size: str) -> Iterator[Path]:
    """A tmpfs of ``size`` mounted at ``path`` (needs root: skipped loudly otherwise)."""
    path.mkdir()
    mounted = (
        os.geteuid() == 0
        and subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)]).returncode == 0
    )
    if not mounted:
        with warnings.catch_warnings():
            warnings.simplefilter("always")
            warnings.warn("SKIPPED: a full filesystem needs a tmpfs mount, which needs root", UserWarning, stacklevel=3)
        pytest.skip("a full filesystem needs a tmpfs mount, which needs root")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)], check=True)


def _fill(directory: Path) -> Path:
    """A file taking every free byte of ``directory``'s filesystem."""
    filler = directory / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc
    finally:
        os.close(fd)
    return filler


def test_a_full_filesystem_stalls_the_table_not_the_stream_and_it_resumes(tmp_path: Path) -> None:
    with _small_filesystem(tmp_path / "tables", "1m") as root:

        async def scenario(w: Wire) -> None:
            await update_topic(w, "orders", "+table.enable=true")
            await send_numbered(w, "orders", 0, 4)
            await until(w, "orders", complete(4))
            filler = _fill(root)
            await send_numbered(w, "orders", 4, 4)  # the stream goes on meanwhile
            await until(w, "orders", stalled("No space left on device"))
            await send_numbered(w, "orders", 8, 2)
            filler.unlink()
            await until(w, "orders", complete(10))

        table_broker(tmp_path, scenario)
        assert_exactly(root / "orders", 10)


def _compacted_after(table: Path, version: int) -> bool:
    return any(h["operation"] == "OPTIMIZE" and h["version"] > version for h in DeltaTable(str(table)).history())


async def _one_data_file(table: Path) -> Path:
    """The table's only data file, once upkeep has compacted it into one (a file compaction is about to replace
    could be hidden with no effect on the version after it)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while len(files := DeltaTable(str(table)).file_uris()) != 1:
        assert loop.time() < deadline, f"upkeep never left one data file: {files}"
        await asyncio.sleep(0.02)
    return Path(files[0])


def test_failing_upkeep_stalls_the_table_and_loses_no_row(tmp_path: Path) -> None:
    """A data file gone missing makes compaction fail: the table is reported stalled (and logged), the
    rows keep coming, and once the file is back upkeep compacts and nothing is lost or doubled."""
    table = tmp_path / "tables" / "orders"

    async def scenario(w: Wire) -> None:
        await update_topic(w, "orders", "+table.enable=true")
        await send_numbered(w, "orders", 0, 4)
        await until(w, "orders", complete(4))
        hidden = await _one_data_file(table)
        hidden.rename(hidden.with_suffix(".away"))
        await send_numbered(w, "orders", 4, 4)
        await until(w, "orders", stalled(hidden.name))
        hidden.with_suffix(".away").rename(hidden)
        back = DeltaTable(str(table)).version()
        await until(w, "orders", lambda s: complete(8)(s) and _compacted_after(table, back))

    table_broker(tmp_path, scenario, table_topic_compact_interval_ms=1)
    assert_exactly(table, 8)
