"""Body CRC checks of the records recovery did not check (store/body_verify.py), over real store files.

A store of several 16 KiB segments closed cleanly: the next start's recovery checks from its anchor
(the newest record) on, so a body byte flipped in the first segment is left to the background walk,
and to the reads that come before it.
"""

from __future__ import annotations

import errno
import os
import threading
from pathlib import Path

import pytest

from sparkmq.connector.local_reads import LocalQueueReads, LocalReadDeclined, StoreFiles
from sparkmq.message import layout as L
from sparkmq.native import queueread
from sparkmq.store import MessageStore, disk
from sparkmq.store.body_verify import UNVERIFIED_FILE
from support.store_checks import read_queue_all
from support.store_damage import damage_bytes
from support.store_data import make_batch, tiny_config

COUNT = 600  # ~8 segments of 16 KiB
DAMAGED = 30  # its record lies in the first segment
DEADLINE_S = 60.0


@pytest.fixture
def damaged_root(tmp_path: Path) -> tuple[Path, list[tuple[int, int]]]:
    """A cleanly closed store of ``COUNT`` messages in queue 0 of T with one body byte of message
    ``DAMAGED`` flipped; (offset, size) per message."""
    root = tmp_path / "store"
    with MessageStore(tiny_config(root)) as store:
        for start in range(0, COUNT, 20):
            assert store.put_messages(make_batch("T", 0, 20, start=start)).ok
        units = store.consume_queue("T", 0).read_units(0, COUNT)  # type: ignore[union-attr]
        records = [(int(u["offset"]), int(u["size"])) for u in units]
    segment_bytes = tiny_config(root).commitlog_file_bytes
    physical = records[DAMAGED][0]
    assert physical < segment_bytes
    damage_bytes(root / "commitlog" / f"{0:020d}", physical + L.POS_BODY + 7, b"\xa5")
    return root, records


def _read_all(store: MessageStore) -> list[int]:
    """Queue offsets of every message of queue 0 of T, read 32 at a time (every body served checked)."""
    return [message.queue_offset for message in read_queue_all(store, "T", 0, chunk=32)]


def _wait(event: threading.Event) -> None:
    assert event.wait(DEADLINE_S), "the body CRC check did not finish"


def test_the_walk_finds_a_damaged_body_before_the_anchor_reports_it_once_and_reads_skip_it(
    damaged_root: tuple[Path, list[tuple[int, int]]],
) -> None:
    root, records = damaged_root
    with MessageStore(tiny_config(root)) as store:
        _wait(store.verifier.done)
        assert store.damage.counts() == {("commitlog", "lost"): 1}
        assert not (root / UNVERIFIED_FILE).exists()
        intact = [q for q in range(COUNT) if q != DAMAGED]
        assert _read_all(store) == intact
        assert _read_all(store) == intact
        assert store.look_message_by_offset(records[DAMAGED][0]) is None
        assert store.query_messages("T", f"key{DAMAGED}", 8) == []
        assert [m.queue_offset for m in store.query_messages("T", f"key{DAMAGED + 1}", 8)] == [DAMAGED + 1]
        assert store.damage.counts() == {("commitlog", "lost"): 1}  # reported once
    with MessageStore(tiny_config(root)) as store:  # its unit stays blank; the next walk finds it again
        _wait(store.verifier.done)
        assert _read_all(store) == intact


def test_reads_before_the_walk_check_each_record_they_serve_once(
    damaged_root: tuple[Path, list[tuple[int, int]]],
) -> None:
    """No walk (rate 0): the range stays unchecked, and reads check what they take from it."""
    root, records = damaged_root
    with MessageStore(tiny_config(root, verify_bytes_per_second=0)) as store:
        assert not store.verifier.done.is_set()
        low, high = (int(part) for part in (root / UNVERIFIED_FILE).read_text().split())
        assert low == 0 and high > records[-10][0]
        assert store.look_message_by_offset(records[DAMAGED][0]) is None  # a lookup checks it too
        assert store.damage.counts() == {("commitlog", "lost"): 1}
        intact = [q for q in range(COUNT) if q != DAMAGED]
        assert _read_all(store) == intact
        assert _read_all(store) == intact
        assert store.damage.counts() == {("commitlog", "lost"): 1}
        assert store.look_message_by_offset(records[DAMAGED][0]) is None


def test_a_pull_frame_read_in_the_window_is_left_to_the_checked_read(
    damaged_root: tuple[Path, list[tuple[int, int]]],
) -> None:
    """The broker's native frame read declines reads that touch the unchecked range; get_messages
    then serves them, checked."""
    root, _records = damaged_root
    answer = ((b"",) * 6, 1, 0, 1, 0)
    with MessageStore(tiny_config(root, verify_bytes_per_second=0)) as store:
        assert store.read_frame("T", 0, DAMAGED - 5, 32, 1 << 20, None, answer) is None  # type: ignore[arg-type]
        assert store.damage.counts() == {}


def test_a_damaged_head_before_the_anchor_is_skipped_and_the_walk_goes_on(tmp_path: Path) -> None:
    root = tmp_path / "store"
    with MessageStore(tiny_config(root)) as store:
        for start in range(0, COUNT, 20):
            assert store.put_messages(make_batch("T", 0, 20, start=start)).ok
        physical = int(store.consume_queue("T", 0).read_units(40, 1)[0]["offset"])  # type: ignore[union-attr]
    damage_bytes(root / "commitlog" / f"{0:020d}", physical + L.POS_MAGIC, b"\0\0\0\0")
    with MessageStore(tiny_config(root)) as store:
        _wait(store.verifier.done)
        assert store.damage.counts() == {("commitlog", "lost"): 1}
        assert _read_all(store) == [q for q in range(COUNT) if q != 40]


@pytest.mark.skipif(queueread is None, reason="local reads use the native gather")
def test_local_reads_decline_the_unchecked_range_then_skip_the_damaged_record(
    damaged_root: tuple[Path, list[tuple[int, int]]],
) -> None:
    root, records = damaged_root
    config = tiny_config(root)
    files = StoreFiles(
        str(config.commitlog_dir),
        str(config.consume_queue_dir),
        config.commitlog_file_bytes,
        config.consume_queue_units_per_file * 20,
    )
    with (
        MessageStore(tiny_config(root, verify_bytes_per_second=0)),
        LocalQueueReads(files, "T", 0) as local,
        pytest.raises(LocalReadDeclined, match="body CRC"),
    ):
        local.read(DAMAGED - 5, 10)
    with MessageStore(config) as store:
        _wait(store.verifier.done)
        with LocalQueueReads(files, "T", 0) as local:
            body, after = local.read(DAMAGED - 4, 6)  # to the end of the first ConsumeQueue file
    assert body is not None and after == DAMAGED + 2
    read = [q for q in range(DAMAGED - 4, DAMAGED + 2) if q != DAMAGED]
    assert len(body) == sum(records[q][1] for q in read)


def test_records_larger_than_a_walk_chunk_are_checked_whole(tmp_path: Path) -> None:
    root = tmp_path / "store"
    config = tiny_config(root, commitlog_file_bytes=1 << 20)
    with MessageStore(config) as store:
        for start in range(0, 24, 4):
            assert store.put_messages(make_batch("T", 0, 4, start=start, body_bytes=100_000)).ok
        physical = int(store.consume_queue("T", 0).read_units(1, 1)[0]["offset"])  # type: ignore[union-attr]
    damage_bytes(root / "commitlog" / f"{0:020d}", physical + L.POS_BODY + 99_000, b"\x00")
    with MessageStore(config) as store:
        _wait(store.verifier.done)
        assert store.damage.counts() == {("commitlog", "lost"): 1}
        assert _read_all(store) == [q for q in range(24) if q != 1]


def test_a_failing_read_halts_the_walk_once_and_reads_check_what_it_did_not_reach(
    damaged_root: tuple[Path, list[tuple[int, int]]], monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The disk answers EIO from the walk's third read on: the walk reports it once and stops; the
    store keeps serving, every read past the walk's end checking the records it serves."""
    root, _records = damaged_root
    calls = iter(range(1_000_000))

    def failing_from_the_third(fd: int, size: int, pos: int) -> bytes:
        if next(calls) >= 2:
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return os.pread(fd, size, pos)

    monkeypatch.setattr(disk, "pread", failing_from_the_third)
    with MessageStore(tiny_config(root)) as store:
        _wait(store.verifier.halted)
        assert store.damage.counts() == {("commitlog", "lost"): 1, ("commitlog", "unreadable"): 1}
        assert not store.verifier.done.is_set() and (root / UNVERIFIED_FILE).exists()
        assert store.verifier.step() == 0  # halted for good
        assert _read_all(store) == [q for q in range(COUNT) if q != DAMAGED]
        assert store.damage.counts() == {("commitlog", "lost"): 1, ("commitlog", "unreadable"): 1}
    reported = [r.getMessage() for r in caplog.records if "damaged commitlog" in r.getMessage()]
    assert len([m for m in reported if "Input/output error" in m]) == 1, reported


def test_a_segment_cut_short_under_the_store_halts_the_walk_without_a_fault(tmp_path: Path) -> None:
    """A segment the walk has not reached loses its end while the store runs: the walk reads it with
    ``pread`` (a read through the mapping there would kill the process with SIGBUS), finds it short,
    reports it once and stops; the records before it are served."""
    root = tmp_path / "store"
    with MessageStore(tiny_config(root)) as store:
        for start in range(0, COUNT, 20):
            assert store.put_messages(make_batch("T", 0, 20, start=start)).ok
    with MessageStore(tiny_config(root, verify_bytes_per_second=0)) as store:
        cut = store.commitlog.queue.files[3]
        os.truncate(cut.path, 100)
        while store.verifier.step():
            pass
        assert store.verifier.halted.is_set() and store.verifier.frontier == cut.start_offset
        assert store.damage.counts() == {("commitlog", "unreadable"): 1}
        first = store.get_messages("G", "T", 0, 0, 32)
        assert first.queue_offsets.tolist() == list(range(32))
