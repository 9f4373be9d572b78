"""ConsumerOffsetTable semantics and consumerOffset.json persistence, on real files."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

import pytest

from sparkmq.errors import OffsetStoreError
from sparkmq.offsets import (
    OFFSET_ABSENT,
    ConsumerOffsetTable,
    OffsetFile,
    OffsetFileRecoveredWarning,
    decode_offset_table,
)

FASTJSON_FILE = (
    '{\n\t"offsetTable":{\n\t\t"%RETRY%CID_TEST@CID_TEST":{0:0},\n\t\t"TopicTest@CID_TEST":{0:5,1:3,2:0,3:2}\n\t}\n}'
)


@pytest.fixture
def offset_path(tmp_path: Path) -> Path:
    return tmp_path / "config" / "consumerOffset.json"


def table_with(*entries: tuple[str, str, int, int]) -> ConsumerOffsetTable:
    table = ConsumerOffsetTable()
    for group, topic, queue_id, offset in entries:
        table.commit(group, topic, queue_id, offset)
    return table


# --- the table -------------------------------------------------------------------------------


def test_query_returns_committed_offset_and_minus_one_when_absent() -> None:
    table = table_with(("CID_TEST", "TopicTest", 0, 5))

    assert table.query("CID_TEST", "TopicTest", 0) == 5
    assert table.query("CID_TEST", "TopicTest", 1) == OFFSET_ABSENT == -1
    assert table.query("OTHER", "TopicTest", 0) == -1
    assert table.query("CID_TEST", "OtherTopic", 0) == -1


def test_commit_overwrites_and_may_rewind() -> None:
    table = table_with(("g", "t", 0, 10), ("g", "t", 0, 3))

    assert table.query("g", "t", 0) == 3


def test_offsets_of_groups_and_topics() -> None:
    table = table_with(("g1", "t1", 0, 5), ("g1", "t1", 1, 7), ("g2", "t1", 0, 1), ("g1", "t2", 3, 9))

    assert table.offsets_of("g1", "t1") == {0: 5, 1: 7}
    assert table.offsets_of("nobody", "t1") == {}
    assert table.groups_of_topic("t1") == {"g1", "g2"}
    assert table.topics_of_group("g1") == {"t1", "t2"}


def test_offsets_of_returns_a_copy() -> None:
    table = table_with(("g", "t", 0, 5))

    table.offsets_of("g", "t")[0] = 99

    assert table.query("g", "t", 0) == 5


def test_remove_group_and_remove_topic() -> None:
    table = table_with(("g1", "t1", 0, 5), ("g1", "t2", 0, 1), ("g2", "t1", 0, 2))

    assert table.remove_group("g1") == 2
    assert table.query("g1", "t1", 0) == -1
    assert table.query("g2", "t1", 0) == 2
    assert table.remove_topic("t1") == 1
    assert len(table) == 0


@pytest.mark.parametrize(
    ("group", "topic", "queue_id", "offset"),
    [
        ("", "t", 0, 0),
        ("g", "", 0, 0),
        ("g@x", "t", 0, 0),
        ("g", "t@x", 0, 0),
        ("g", "t", -1, 0),
        ("g", "t", 0, -5),
    ],
)
def test_commit_rejects_entries_that_cannot_be_persisted(group: str, topic: str, queue_id: int, offset: int) -> None:
    with pytest.raises(OffsetStoreError):
        ConsumerOffsetTable().commit(group, topic, queue_id, offset)


def test_concurrent_commits_are_all_kept() -> None:
    table = ConsumerOffsetTable()

    def commit_queue(queue_id: int) -> None:
        for offset in range(500):
            table.commit("g", "t", queue_id, offset)

    threads = [threading.Thread(target=commit_queue, args=(queue_id,)) for queue_id in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert table.offsets_of("g", "t") == {queue_id: 499 for queue_id in range(8)}


# --- the file --------------------------------------------------------------------------------


def test_missing_file_loads_as_empty_table(offset_path: Path) -> None:
    table = OffsetFile(offset_path).load()

    assert len(table) == 0
    assert not offset_path.exists()


def test_offsets_survive_a_restart(offset_path: Path) -> None:
    OffsetFile(offset_path).persist(table_with(("CID_TEST", "TopicTest", 0, 5), ("CID_TEST", "TopicTest", 3, 2)))

    reloaded = OffsetFile(offset_path).load()

    assert reloaded.offsets_of("CID_TEST", "TopicTest") == {0: 5, 3: 2}
    assert reloaded.query("CID_TEST", "TopicTest", 1) == -1


def test_written_file_is_standard_json_in_rocketmq_shape(offset_path: Path) -> None:
    table = table_with(
        ("CID_TEST", "TopicTest", 10, 4),
        ("CID_TEST", "TopicTest", 2, 8),
        ("CID_TEST", "%RETRY%CID_TEST", 0, 0),
    )

    OffsetFile(offset_path).persist(table)

    text = offset_path.read_text(encoding="utf-8")
    assert json.loads(text) == {
        "offsetTable": {
            "%RETRY%CID_TEST@CID_TEST": {"0": 0},
            "TopicTest@CID_TEST": {"2": 8, "10": 4},
        }
    }
    assert list(json.loads(text)["offsetTable"]["TopicTest@CID_TEST"]) == ["2", "10"]
    assert '\t"offsetTable"' in text


def test_loads_fastjson_file_with_unquoted_integer_keys_and_tabs(offset_path: Path) -> None:
    offset_path.parent.mkdir(parents=True)
    offset_path.write_text(FASTJSON_FILE, encoding="utf-8")

    table = OffsetFile(offset_path).load()

    assert table.offsets_of("CID_TEST", "TopicTest") == {0: 5, 1: 3, 2: 0, 3: 2}
    assert table.offsets_of("CID_TEST", "%RETRY%CID_TEST") == {0: 0}


def test_fastjson_compact_real_world_example_decodes() -> None:
    text = '{"offsetTable":{"test@benchmark_consumer_61":{0:5280,1:5312,2:5312,3:5312}}}'

    assert decode_offset_table(text) == {("test", "benchmark_consumer_61"): {0: 5280, 1: 5312, 2: 5312, 3: 5312}}


def test_digits_inside_quoted_names_are_left_alone() -> None:
    text = '{"offsetTable":{"t,1:2@g{3:4":{0:1}}}'

    assert decode_offset_table(text) == {("t,1:2", "g{3:4"): {0: 1}}


def test_unknown_top_level_fields_are_ignored() -> None:
    text = '{"dataVersion":{"counter":3,"timestamp":1700000000000},"offsetTable":{"t@g":{0:1}}}'

    assert decode_offset_table(text) == {("t", "g"): {0: 1}}


def test_second_persist_keeps_previous_file_as_bak(offset_path: Path) -> None:
    offset_file = OffsetFile(offset_path)
    offset_file.persist(table_with(("g", "t", 0, 1)))
    offset_file.persist(table_with(("g", "t", 0, 2)))

    assert decode_offset_table(offset_path.read_text(encoding="utf-8")) == {("t", "g"): {0: 2}}
    assert decode_offset_table(offset_file.backup_path.read_text(encoding="utf-8")) == {("t", "g"): {0: 1}}


@pytest.mark.parametrize(
    "corrupt_content",
    [
        b'{"offsetTable":{"t@g":{0:',
        b"",
        b"\xff\xfe\x00",
        b"[1, 2]",
        b'{"offsetTable":{"no-separator":{"0":1}}}',
    ],
)
def test_corrupt_file_falls_back_to_bak_with_warning(offset_path: Path, corrupt_content: bytes) -> None:
    offset_file = OffsetFile(offset_path)
    offset_file.persist(table_with(("g", "t", 0, 1)))
    offset_file.persist(table_with(("g", "t", 0, 2)))
    offset_path.write_bytes(corrupt_content)

    with pytest.warns(OffsetFileRecoveredWarning, match="consumerOffset.json.bak"):
        table = OffsetFile(offset_path).load()

    assert table.query("g", "t", 0) == 1


def test_missing_main_file_with_bak_present_recovers_from_bak(offset_path: Path) -> None:
    offset_file = OffsetFile(offset_path)
    offset_file.persist(table_with(("g", "t", 0, 1)))
    offset_file.persist(table_with(("g", "t", 0, 2)))
    offset_path.unlink()

    with pytest.warns(OffsetFileRecoveredWarning, match="is missing"):
        table = OffsetFile(offset_path).load()

    assert table.query("g", "t", 0) == 1


def test_both_files_corrupt_raises_offset_store_error(offset_path: Path) -> None:
    offset_file = OffsetFile(offset_path)
    offset_file.persist(table_with(("g", "t", 0, 1)))
    offset_file.persist(table_with(("g", "t", 0, 2)))
    offset_path.write_text("not json", encoding="utf-8")
    offset_file.backup_path.write_text('{"offsetTable":{"t@g":{0:"five"}}}', encoding="utf-8")

    with pytest.raises(OffsetStoreError) as caught:
        OffsetFile(offset_path).load()

    remark = caught.value.remark
    assert str(offset_path) in remark and "not valid JSON" in remark
    assert str(offset_file.backup_path) in remark and "not an integer offset" in remark


def test_corrupt_file_without_bak_raises_instead_of_loading_empty(offset_path: Path) -> None:
    offset_path.parent.mkdir(parents=True)
    offset_path.write_text("{garbage", encoding="utf-8")

    with pytest.raises(OffsetStoreError, match="no backup"):
        OffsetFile(offset_path).load()


def test_persist_over_corrupt_file_keeps_the_usable_bak(offset_path: Path) -> None:
    offset_file = OffsetFile(offset_path)
    offset_file.persist(table_with(("g", "t", 0, 1)))
    offset_file.persist(table_with(("g", "t", 0, 2)))
    offset_path.write_text("{garbage", encoding="utf-8")

    offset_file.persist(table_with(("g", "t", 0, 3)))

    assert OffsetFile(offset_path).load().query("g", "t", 0) == 3
    assert decode_offset_table(offset_file.backup_path.read_text(encoding="utf-8")) == {("t", "g"): {0: 1}}


def test_tmp_left_by_a_crash_is_ignored_on_load(offset_path: Path) -> None:
    offset_file = OffsetFile(offset_path)
    offset_file.persist(table_with(("g", "t", 0, 5)))
    offset_file.tmp_path.write_text('{"offsetTable":{"t@g":{0:', encoding="utf-8")

    assert OffsetFile(offset_path).load().query("g", "t", 0) == 5

    offset_file.persist(table_with(("g", "t", 0, 6)))
    assert OffsetFile(offset_path).load().query("g", "t", 0) == 6


def test_persist_interrupted_before_rename_keeps_old_offsets(
    offset_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    offset_file = OffsetFile(offset_path)
    offset_file.persist(table_with(("g", "t", 0, 5)))
    real_replace = os.replace

    def crash_on_final_rename(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
        if Path(target) == offset_path:
            raise OSError(28, "No space left on device")
        real_replace(source, target)

    monkeypatch.setattr(os, "replace", crash_on_final_rename)

    with pytest.raises(OffsetStoreError, match="cannot persist .*consumerOffset.json") as caught:
        offset_file.persist(table_with(("g", "t", 0, 6)))

    monkeypatch.undo()
    assert isinstance(caught.value.__cause__, OSError)
    assert offset_file.tmp_path.exists()
    assert OffsetFile(offset_path).load().query("g", "t", 0) == 5


def test_persist_reports_unwritable_directory(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("", encoding="utf-8")

    with pytest.raises(OffsetStoreError, match="cannot persist"):
        OffsetFile(blocker / "consumerOffset.json").persist(table_with(("g", "t", 0, 1)))


def test_concurrent_persists_leave_a_valid_file(offset_path: Path) -> None:
    offset_file = OffsetFile(offset_path)
    table = ConsumerOffsetTable()

    def commit_and_persist(queue_id: int) -> None:
        for offset in range(20):
            table.commit("g", "t", queue_id, offset)
            offset_file.persist(table)

    threads = [threading.Thread(target=commit_and_persist, args=(queue_id,)) for queue_id in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert OffsetFile(offset_path).load().offsets_of("g", "t") == {queue_id: 19 for queue_id in range(4)}
