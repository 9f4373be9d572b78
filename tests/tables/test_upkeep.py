"""Issue 32, upkeep: compaction of a topic table's small files and vacuum, rows and queue transactions unchanged."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from deltalake import DeltaTable

from sparkmq.errors import ConfigError
from sparkmq.tables.layout import RAW_SCHEMA, app_id, table_uri
from sparkmq.tables.upkeep import checkpoint, compact, vacuum
from support.delta_tables import write_queue

TOPIC = "orders"
COMMITS = 12  # per queue: one small file each, as a materializer's commits leave them


def _rows(queue_id: int, start: int, count: int) -> pa.Table:
    return pa.Table.from_pylist(
        [
            {"topic": TOPIC, "brokerName": "broker-a", "queueId": queue_id, "queueOffset": o, "body": b"m%d" % o}
            for o in range(start, start + count)
        ],
        schema=RAW_SCHEMA,
    )


def _small_files_table(root: Path) -> str:
    uri = table_uri(str(root), TOPIC)
    for commit in range(COMMITS):
        for queue_id in (0, 1):
            write_queue(uri, _rows(queue_id, commit * 10, 10), TOPIC, queue_id, (commit + 1) * 10)
    return uri


def _content(uri: str) -> list[tuple[int, int, bytes]]:
    table = DeltaTable(uri).to_pyarrow_table(columns=["queueId", "queueOffset", "body"])
    return sorted(zip(*(table[c].to_pylist() for c in ("queueId", "queueOffset", "body")), strict=True))


def _data_files(uri: str) -> set[str]:
    return {p.name for p in Path(uri).glob("*.parquet")}


def test_compaction_merges_small_files_and_keeps_rows_and_queue_offsets(tmp_path: Path) -> None:
    uri = _small_files_table(tmp_path)
    rows = _content(uri)
    assert len(DeltaTable(uri).file_uris()) == 2 * COMMITS
    done = compact(uri)
    table = DeltaTable(uri)
    assert done.files_removed == 2 * COMMITS and done.files_added == len(table.file_uris()) == 1
    assert done.version == table.version()
    assert _content(uri) == rows
    assert [table.transaction_version(app_id(TOPIC, q)) for q in (0, 1)] == [COMMITS * 10, COMMITS * 10]
    assert compact(uri).version is None  # nothing small left: no commit


def test_vacuum_deletes_the_files_compaction_replaced_once_out_of_retention(tmp_path: Path) -> None:
    uri = _small_files_table(tmp_path)
    rows, replaced = _content(uri), _data_files(uri)
    compact(uri)
    assert vacuum(uri, 168) == []  # a week's retention keeps what younger versions read
    deleted = vacuum(uri, 0)
    assert {Path(p).name for p in deleted} == replaced
    assert _data_files(uri) == {Path(u).name for u in DeltaTable(uri).file_uris()}
    assert _content(uri) == rows
    assert DeltaTable(uri).transaction_version(app_id(TOPIC, 1)) == COMMITS * 10


def test_a_checkpoint_holds_the_rows_and_queue_offsets_a_new_reader_starts_from(tmp_path: Path) -> None:
    uri = _small_files_table(tmp_path)
    rows = _content(uri)
    version = checkpoint(uri)
    assert version == DeltaTable(uri).version() == 2 * COMMITS - 1  # the first write created it: version 0
    assert (Path(uri) / "_delta_log" / f"{version:020d}.checkpoint.parquet").exists()
    for log in Path(uri, "_delta_log").glob("*.json"):  # the checkpoint alone must hold the snapshot
        log.unlink()
    table = DeltaTable(uri)
    assert table.version() == version and _content(uri) == rows
    assert [table.transaction_version(app_id(TOPIC, q)) for q in (0, 1)] == [COMMITS * 10, COMMITS * 10]


def test_a_negative_retention_is_refused(tmp_path: Path) -> None:
    uri = _small_files_table(tmp_path)
    with pytest.raises(ConfigError, match="negative"):
        vacuum(uri, -1)
    assert len(_data_files(uri)) == 2 * COMMITS
