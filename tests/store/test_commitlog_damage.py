"""Damaged CommitLog records: recovery steps over them to the next record proven intact instead of
cutting the log there, reports each, and consumers move past them; nothing else is lost."""

from __future__ import annotations

import shutil
from pathlib import Path

from sparkmq.message import layout as L
from sparkmq.store import GetMessageStatus, MessageStore
from support.store_damage import damage_bytes
from support.store_data import make_batch, tiny_config

COUNT = 60


def _filled(root: Path) -> tuple[list[tuple[int, int]], int]:
    """``COUNT`` messages in queue 0 of T, stored and closed cleanly: (offset, size) per message, the log's end."""
    with MessageStore(tiny_config(root)) as store:
        for start in range(0, COUNT, 10):
            assert store.put_messages(make_batch("T", 0, 10, start=start)).ok
        units = store.consume_queue("T", 0).read_units(0, COUNT)  # type: ignore[union-attr]
        return [(int(u["offset"]), int(u["size"])) for u in units], store.commitlog.max_offset


def _as_after_a_machine_crash(root: Path) -> None:
    """An abort marker naming another boot: the next start checks the log from the checkpoint's safe point."""
    (root / "abort").write_text("another-boot")


def _damage(root: Path, physical: int, at: int, data: bytes) -> None:
    segment_bytes = tiny_config(root).commitlog_file_bytes
    segment = root / "commitlog" / f"{physical - physical % segment_bytes:020d}"
    damage_bytes(segment, physical % segment_bytes + at, data)


def _read_all(store: MessageStore) -> list[int]:
    """Queue offsets of every message read from queue 0, following nextBeginOffset."""
    offsets: list[int] = []
    offset = 0
    while offset < store.max_offset_in_queue("T", 0):
        result = store.get_messages("G", "T", 0, offset, 7)
        if result.status is GetMessageStatus.FOUND:
            offsets += result.queue_offsets.tolist()
        assert result.next_begin_offset > offset
        offset = result.next_begin_offset
    return offsets


def test_a_record_whose_body_fails_its_crc_is_skipped_and_consumers_move_past_it(tmp_path: Path) -> None:
    root = tmp_path / "store"
    records, end = _filled(root)
    physical, size = records[30]
    _damage(root, physical, L.POS_BODY + 5, b"\xff")  # a byte of its body
    _as_after_a_machine_crash(root)
    with MessageStore(tiny_config(root)) as store:
        assert store.commitlog.max_offset == end  # nothing after it was cut
        assert _read_all(store) == [q for q in range(COUNT) if q != 30]
        assert store.damage.counts() == {("commitlog", "skipped"): 1}


def test_a_record_whose_head_is_damaged_does_not_cut_the_intact_records_after_it(tmp_path: Path) -> None:
    root = tmp_path / "store"
    records, end = _filled(root)
    physical, _size = records[40]
    _damage(root, physical, L.POS_MAGIC, b"\0\0\0\0")
    _as_after_a_machine_crash(root)
    with MessageStore(tiny_config(root)) as store:
        assert store.commitlog.max_offset == end
        assert _read_all(store) == [q for q in range(COUNT) if q != 40]
        assert store.damage.counts() == {("commitlog", "skipped"): 1}  # its unit blanked: its head still names it
        assert store.put_messages(make_batch("T", 0, 1, start=COUNT)).queue_offset == COUNT


def test_a_torn_tail_is_still_cut(tmp_path: Path) -> None:
    """Garbage after the last record, with no intact record after it, ends the log as before."""
    root = tmp_path / "store"
    records, end = _filled(root)
    physical, size = records[-1]
    _damage(root, physical + size, 0, b"\x00\x00\x01\x00garbage")
    _as_after_a_machine_crash(root)
    with MessageStore(tiny_config(root)) as store:
        assert store.commitlog.max_offset == end
        assert _read_all(store) == list(range(COUNT))
        assert store.damage.counts() == {}


def test_a_damaged_record_does_not_end_the_replay_that_rebuilds_a_lost_queue(tmp_path: Path) -> None:
    """T's ConsumeQueue is lost and rebuilt from the CommitLog's start while U's, intact, anchors recovery
    at the log's end: the replay steps over a T record whose body fails its CRC (reported once) and
    dispatches every intact record after it."""
    root = tmp_path / "store"
    with MessageStore(tiny_config(root)) as store:
        for start in range(0, 400, 10):  # over six segments
            assert store.put_messages(make_batch("T", 0, 10, start=start)).ok
            assert store.put_messages(make_batch("U", 0, 1, start=start)).ok
        physical = int(store.consume_queue("T", 0).read_units(5, 1)[0]["offset"])  # type: ignore[union-attr]
        end = store.commitlog.max_offset
    _damage(root, physical, L.POS_BODY + 5, b"\xff")
    shutil.rmtree(root / "consumequeue" / "T")
    with MessageStore(tiny_config(root)) as store:
        assert store.commitlog.max_offset == end
        assert _read_all(store) == [q for q in range(400) if q != 5]
        assert store.damage.counts() == {("commitlog", "skipped"): 1}
