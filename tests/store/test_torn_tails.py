"""Recovery from damaged tails: torn and corrupt records, garbage, lost ConsumeQueues and indexes.

Each test writes a store, closes it, damages its files the way a crash (or a disk) would,
then reopens it, either as after a clean exit or as after a crash (the ``abort`` marker left
in place), and checks what ``store_checks.check_consistent`` checks plus the exact content.
Segments are preallocated, so damage overwrites bytes and never shrinks a file.
"""

from __future__ import annotations

import os
import random
import time
import types
from pathlib import Path
from typing import Any

import pytest

from sparkmq.message import MessageBatch, StoredMessage, decode_properties, encode_properties
from sparkmq.message import layout as L
from sparkmq.store import GetMessageStatus, MessageStore
from sparkmq.store import message_store as message_store_module
from sparkmq.store.index_service import IndexService
from sparkmq.store.mapped_file import MappedFile
from sparkmq.store.recovery import boot_id

_HERE = Path(__file__).parent


from support import store_checks as sc  # noqa: E402 - shared with crash_writer.py

SEED = 7
TOPIC = sc.TOPIC
PROCESS = "process"  # ``crashed`` value: only the process died (the abort marker names this boot)
CRASHED = pytest.mark.parametrize("crashed", [False, PROCESS, True], ids=["clean-exit", "process-crash", "crashed"])


class Written:
    """What a test put: per message (queue, queue offset, physical offset, size, body, properties)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, int, int, int, bytes, bytes]] = []

    def put(self, store: MessageStore, batch: MessageBatch) -> Any:
        result = store.put_messages(batch)
        assert result.ok, result
        for i in range(len(batch)):
            self.rows.append(
                (
                    batch.queue_id,
                    result.queue_offset + i,
                    int(result.physical_offsets[i]),
                    int(result.sizes[i]),
                    bytes(batch.bodies[i]),
                    bytes(batch.properties[i]),
                )
            )
        return result

    def put_seq(self, store: MessageStore, seq: int, **kwargs: int) -> Any:
        return self.put(store, sc.expected_batch(SEED, seq, **kwargs).batch())

    @property
    def last(self) -> tuple[int, int, int, int, bytes, bytes]:
        return max(self.rows, key=lambda row: row[2])

    def before(self, physical_end: int) -> dict[int, list[tuple[int, int, bytes, bytes]]]:
        """Per queue, the (queue offset, physical offset, body, properties) stored below ``physical_end``."""
        queues: dict[int, list[tuple[int, int, bytes, bytes]]] = {}
        for queue_id, queue_offset, physical, _size, body, props in sorted(self.rows, key=lambda r: r[2]):
            if physical < physical_end:
                queues.setdefault(queue_id, []).append((queue_offset, physical, body, props))
        return queues


def open_store(root: Path, crashed: bool | str = False) -> tuple[MessageStore, Any]:
    """Start a store over ``root``; ``crashed`` leaves an abort marker first (abnormal recovery):
    empty as after a machine crash, or naming this boot (``PROCESS``) as after a kill -9."""
    config = sc.crash_config(root)
    if crashed:
        config.abort_path.write_text(boot_id() if crashed == PROCESS else "")
    store = MessageStore(config)
    return store, store.start()


def assert_holds(
    store: MessageStore, written: Written, physical_end: int
) -> dict[tuple[str, int], list[StoredMessage]]:
    """The store is consistent and holds exactly the written messages below ``physical_end``."""
    queues = sc.check_consistent(store)
    expected = written.before(physical_end)
    got = {
        queue_id: [(m.queue_offset, m.physical_offset, bytes(m.body), m.properties_raw) for m in messages]
        for (_topic, queue_id), messages in queues.items()
        if messages
    }
    assert got == expected
    assert store.commitlog.max_offset == physical_end
    return queues


def write_bytes(root: Path, physical_offset: int, data: bytes) -> None:
    """Overwrite CommitLog bytes at a global offset (within one segment), file size unchanged."""
    start = physical_offset - physical_offset % sc.SEGMENT_BYTES
    path = root / "commitlog" / f"{start:020d}"
    size = path.stat().st_size
    assert physical_offset - start + len(data) <= size
    with path.open("r+b") as segment:
        segment.seek(physical_offset - start)
        segment.write(data)
    assert path.stat().st_size == size


def zero_from(root: Path, physical_offset: int) -> None:
    """Zero the CommitLog from ``physical_offset`` to the end of its segment and all later ones."""
    start = physical_offset - physical_offset % sc.SEGMENT_BYTES
    write_bytes(root, physical_offset, bytes(start + sc.SEGMENT_BYTES - physical_offset))
    for path in sorted((root / "commitlog").iterdir()):
        if int(path.name) > start:
            write_bytes(root, int(path.name), bytes(sc.SEGMENT_BYTES))


def fill(root: Path, batches: int = 40, first_seq: int = 0) -> Written:
    """A closed store of ``batches`` random batches over 3 queues (a few segments)."""
    written = Written()
    store, _report = open_store(root)
    try:
        for seq in range(first_seq, first_seq + batches):
            written.put_seq(store, seq)
    finally:
        store.close()
    return written


def append_continues(store: MessageStore, written: Written, queue_id: int, physical_end: int) -> None:
    """The next append lands exactly at the valid end and continues the queue's offsets."""
    next_queue_offset = sum(1 for row in written.rows if row[0] == queue_id and row[2] < physical_end)
    written.rows = [row for row in written.rows if row[2] < physical_end]
    batch = MessageBatch(TOPIC, queue_id, [b"after-the-cut"], [encode_properties({"UNIQ_KEY": "AFTER"})])
    result = written.put(store, batch)
    assert result.queue_offset == next_queue_offset
    left = sc.SEGMENT_BYTES - physical_end % sc.SEGMENT_BYTES
    if left >= int(result.sizes[0]) + L.END_FILE_MIN_BLANK_LENGTH:
        assert result.wrote_offset == physical_end
    else:  # too close to the segment end: a filler, then the next segment
        assert result.wrote_offset == physical_end + left


def reopen_and_check(root: Path, written: Written) -> None:
    """A clean reopen after the repair keeps everything and finds no torn tail."""
    store, report = open_store(root)
    try:
        assert report.last_exit_ok and not report.torn_tail
        assert_holds(store, written, store.commitlog.max_offset)
        assert store.commitlog.max_offset == max(row[2] + row[3] for row in written.rows)
    finally:
        store.close()


# -- (a) (b) (c) (d) (e): the CommitLog tail ---------------------------------------------------------


@CRASHED
def test_record_cut_midway_is_dropped_and_the_log_continues_at_its_start(tmp_path: Path, crashed: bool) -> None:
    root = tmp_path / "store"
    written = fill(root)
    queue_id, queue_offset, start, size, _body, _props = written.last
    write_bytes(root, start + size // 2, bytes(size - size // 2))
    store, report = open_store(root, crashed)
    try:
        assert (report.last_exit_ok, report.process_offset, report.torn_tail) == (not crashed, start, True)
        assert_holds(store, written, start)
        assert store.max_offset_in_queue(TOPIC, queue_id) == queue_offset
        got = store.get_messages("g", TOPIC, queue_id, queue_offset, 8)
        assert got.status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        append_continues(store, written, queue_id, start)
    finally:
        store.close()
    reopen_and_check(root, written)


@CRASHED
def test_record_with_a_flipped_body_byte_fails_its_crc_and_is_dropped(tmp_path: Path, crashed: bool) -> None:
    root = tmp_path / "store"
    written = fill(root, 30)
    store, _report = open_store(root)
    try:
        last = written.put(store, MessageBatch(TOPIC, 1, [b"B" * 700], [encode_properties({"UNIQ_KEY": "LAST"})]))
        start = last.wrote_offset
    finally:
        store.close()
    write_bytes(root, start + L.POS_BODY + 350, b"C")  # TOTALSIZE, lengths and magic stay plausible
    store, report = open_store(root, crashed)
    try:
        assert (report.process_offset, report.torn_tail) == (start, True)
        assert_holds(store, written, start)
        assert store.query_messages(TOPIC, "LAST", 4) == []
        append_continues(store, written, 1, start)
    finally:
        store.close()
    reopen_and_check(root, written)


@CRASHED
def test_torn_record_in_the_middle_of_the_last_segment_followed_by_zeros(tmp_path: Path, crashed: bool) -> None:
    root = tmp_path / "store"
    written = fill(root)
    last_segment = written.last[2] - written.last[2] % sc.SEGMENT_BYTES
    in_last = sorted((row for row in written.rows if row[2] >= last_segment), key=lambda row: row[2])
    assert len(in_last) >= 4, "the last segment should hold a few records"
    victim = in_last[len(in_last) // 2]
    start, size = victim[2], victim[3]
    zero_from(root, start + max(size // 3, L.POS_BODY))  # head whole, body and what follows gone
    store, report = open_store(root, crashed)
    try:
        assert (report.process_offset, report.torn_tail) == (start, True)
        assert_holds(store, written, start)
        append_continues(store, written, victim[0], start)
    finally:
        store.close()
    reopen_and_check(root, written)


def test_torn_record_below_the_flushed_point_is_skipped_and_the_records_after_it_kept(tmp_path: Path) -> None:
    """After a machine crash (an abort marker naming no boot) the replay starts at a segment the
    checkpoint proves safe and meets a record torn before the newest one. Everything after it was
    flushed before the crash (the checkpoint says so), so the tear is the disk's, not a put's: the
    record is skipped and reported, its unit blanked, and the intact records after it are kept (no
    segment is dropped). After a clean exit or a crash of the process alone, start-up trusts what
    precedes the newest intact record (bounded start-up): reads meet such damage instead."""
    crashed = True
    root = tmp_path / "store"
    written = fill(root, 60)
    segments = sorted(int(p.name) for p in (root / "commitlog").iterdir())
    assert len(segments) >= 3
    previous = segments[-2]
    victims = sorted(
        (row for row in written.rows if previous <= row[2] < segments[-1] and len(row[4]) > 16), key=lambda row: row[2]
    )
    victim = victims[len(victims) // 2]
    start, size = victim[2], victim[3]
    torn_at = start + L.POS_BODY + len(victim[4]) // 2  # the second half of the body never made it
    write_bytes(root, torn_at, bytes(start + size - torn_at))  # the rest of the segment is intact
    end = written.last[2] + written.last[3]
    kept = Written()
    kept.rows = [row for row in written.rows if row[2] != start]
    for crash in (crashed, False):  # and a clean reopen after it
        store, report = open_store(root, crash)
        try:
            assert (report.process_offset, report.torn_tail) == (end, False)
            assert [f.start_offset for f in store.commitlog.queue.files] == segments
            for queue_id in {row[0] for row in written.rows}:
                messages = sc.read_queue_all(store, TOPIC, queue_id)
                got = [(m.queue_offset, m.physical_offset, bytes(m.body)) for m in messages]
                assert got == sorted((row[1], row[2], row[4]) for row in kept.rows if row[0] == queue_id)
            assert store.damage.counts() == ({("commitlog", "skipped"): 1} if crash else {})
        finally:
            store.close()


@CRASHED
@pytest.mark.parametrize("garbage", ["random", "message-magic", "blank-magic"])
def test_garbage_after_the_last_record_is_ignored_and_zeroed(tmp_path: Path, crashed: bool, garbage: str) -> None:
    root = tmp_path / "store"
    written = fill(root)
    queue_id, _queue_offset, start, size, _body, _props = written.last
    end = start + size
    junk = random.Random(3).randbytes(300)
    if garbage == "message-magic":  # a plausible head: magic right, size fits, the rest is noise
        junk = (200).to_bytes(4, "big") + (L.MESSAGE_MAGIC_CODE & 0xFFFFFFFF).to_bytes(4, "big") + junk[8:]
    elif garbage == "blank-magic":  # an END_OF_FILE filler that does not reach the segment end
        junk = (64).to_bytes(4, "big") + (L.BLANK_MAGIC_CODE & 0xFFFFFFFF).to_bytes(4, "big")
    write_bytes(root, end, junk)
    store, report = open_store(root, crashed)
    try:
        assert (report.process_offset, report.torn_tail) == (end, True)
        assert_holds(store, written, end)  # also: every byte after the end reads as zero again
        append_continues(store, written, queue_id, end)
    finally:
        store.close()
    reopen_and_check(root, written)


@CRASHED
def test_consume_queue_units_past_the_valid_end_are_dropped(tmp_path: Path, crashed: bool) -> None:
    root = tmp_path / "store"
    written = fill(root, 60)
    tail = sorted(written.rows, key=lambda row: row[2])[-40:]  # the last 40 records, all queues
    cut = tail[0][2]
    assert {row[0] for row in tail} == {0, 1, 2}
    zero_from(root, cut)
    segments_before = len(list((root / "commitlog").iterdir()))
    store, report = open_store(root, crashed)
    try:
        assert (report.process_offset, report.torn_tail) == (cut, False)  # only zeros follow the cut
        queues = assert_holds(store, written, cut)
        for queue_id in range(3):
            kept = len(queues.get((TOPIC, queue_id), []))
            assert store.max_offset_in_queue(TOPIC, queue_id) == kept
            assert store.get_messages("g", TOPIC, queue_id, kept, 8).status is GetMessageStatus.OFFSET_OVERFLOW_ONE
        assert len(store.commitlog.queue.files) == cut // sc.SEGMENT_BYTES + 1 <= segments_before
        for row in tail:
            assert store.query_messages(TOPIC, decode_properties(row[5])["UNIQ_KEY"], 4) == []
        append_continues(store, written, tail[0][0], cut)
    finally:
        store.close()
    reopen_and_check(root, written)


# -- (f) (g): derived indexes rebuilt from the CommitLog ------------------------------------------------


def fill_aged(root: Path, monkeypatch: pytest.MonkeyPatch, aged: bool, batches: int = 60) -> Written:
    """Like ``fill``; when ``aged`` the batches are stored an hour ago and one more now, so the
    checkpoint proves all but the newest segment safe (abnormal recovery starts there)."""
    if not aged:
        return fill(root, batches)
    past = types.SimpleNamespace(time=lambda: time.time() - 3600, monotonic=time.monotonic)
    written = Written()
    store, _report = open_store(root)
    try:
        with monkeypatch.context() as patch:
            patch.setattr(message_store_module, "time", past)
            for seq in range(batches):
                written.put_seq(store, seq)
        for seq in range(batches, batches + 25):  # now: enough to start a new segment; queue 2 stays idle
            expected = sc.expected_batch(SEED, seq)
            written.put(store, MessageBatch(TOPIC, seq % 2, expected.bodies, expected.properties))
    finally:
        store.close()
    assert len(list((root / "commitlog").iterdir())) >= 4
    return written


def queue_with_most_files(root: Path) -> Path:
    dirs = [d for d in (root / "consumequeue" / TOPIC).iterdir()]
    return max(dirs, key=lambda d: len(list(d.iterdir())))


def lost_queue_cases() -> list[Any]:
    """Every loss, with the data recent (replayed anyway) or aged (before the checkpoint's safe segment)."""
    cases = [
        pytest.param(loss, aged, True, id=f"{loss}-{'aged' if aged else 'recent'}")
        for loss in ["queue-dir", "last-file", "idle-queue-last-file", "first-file", "middle-file", "all-queues"]
        for aged in (False, True)
    ]
    cases += [
        pytest.param(loss, True, crashed, id=f"{loss}-aged-{'process-crash' if crashed else 'clean-exit'}")
        for loss in ["queue-dir", "idle-queue-last-file", "first-file", "middle-file"]
        for crashed in (PROCESS, False)
    ]
    return cases


@pytest.mark.parametrize(("loss", "aged", "crashed"), lost_queue_cases())
def test_lost_consume_queue_files_are_rebuilt_after_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loss: str, aged: bool, crashed: bool | str
) -> None:
    root = tmp_path / "store"
    written = fill_aged(root, monkeypatch, aged)
    queue_dir = root / "consumequeue" / TOPIC / "2" if loss.startswith("idle") else queue_with_most_files(root)
    files = sorted(queue_dir.iterdir())
    assert len(files) >= 3, "the queue should span several ConsumeQueue files"
    if loss == "queue-dir":
        for path in files:
            path.unlink()
        queue_dir.rmdir()
    elif loss in ("last-file", "idle-queue-last-file"):
        files[-1].unlink()  # an idle queue's last file holds only old units: its max offset goes back
    elif loss == "first-file":
        files[0].unlink()
    elif loss == "middle-file":
        files[1].unlink()
    else:
        for path in (root / "consumequeue").rglob("*"):
            if path.is_file():
                path.unlink()
    end = written.last[2] + written.last[3]
    store, report = open_store(root, crashed)
    try:
        assert report.last_exit_ok is not crashed
        if crashed is True:
            assert (report.dispatched_from > 0) is aged  # aged: the replay starts at a later segment
        else:
            assert report.anchored  # the tail replay starts at the newest record
        assert_holds(store, written, end)
        append_continues(store, written, int(queue_dir.name), end)
    finally:
        store.close()
    reopen_and_check(root, written)


def lost_index_cases() -> list[Any]:
    return [
        pytest.param(loss, aged, id=f"{loss}-{'aged' if aged else 'recent'}")
        for loss in ["index-files", "newest-index-file", "checkpoint-zeroed", "checkpoint-deleted"]
        for aged in (False, True)
    ]


@pytest.mark.parametrize(("loss", "aged"), lost_index_cases())
def test_keys_are_found_after_index_or_checkpoint_loss_and_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, loss: str, aged: bool
) -> None:
    root = tmp_path / "store"
    written = fill_aged(root, monkeypatch, aged)
    index_files = sorted((root / "index").iterdir())
    assert len(index_files) >= 2
    if loss == "index-files":
        for path in index_files:
            path.unlink()
    elif loss == "newest-index-file":
        index_files[-1].unlink()
    elif loss == "checkpoint-zeroed":
        with (root / "checkpoint").open("r+b") as checkpoint:
            checkpoint.write(bytes(4096))
    else:
        (root / "checkpoint").unlink()
    store, report = open_store(root, crashed=True)
    try:
        assert not report.last_exit_ok
        assert_holds(store, written, written.last[2] + written.last[3])
        assert_every_key_found_once(store, written)
    finally:
        store.close()


def assert_every_key_found_once(store: MessageStore, written: Written) -> None:
    for _queue_id, _queue_offset, physical, _size, body, props in written.rows:
        fields = decode_properties(props)
        for key in [fields["UNIQ_KEY"], fields["KEYS"].split(" ")[0]]:
            found = store.query_messages(TOPIC, key, 8)
            assert [(m.physical_offset, bytes(m.body)) for m in found] == [(physical, body)], key


def test_clean_restarts_do_not_index_the_last_message_again(tmp_path: Path) -> None:
    root = tmp_path / "store"
    written = fill(root, 10)
    for _ in range(3):
        store, report = open_store(root)
        try:
            assert report.last_exit_ok
            assert_every_key_found_once(store, written)
        finally:
            store.close()


def test_replay_indexes_records_of_interleaved_queues(tmp_path: Path) -> None:
    """Recovery re-dispatches per queue run; every record of every queue must reach the index."""
    root = tmp_path / "store"
    written = Written()
    store, _report = open_store(root)
    try:
        for i in range(300):
            batch = MessageBatch(
                TOPIC, i % 3, [b"m%d" % i], [encode_properties({"UNIQ_KEY": f"I{i}", "KEYS": f"k{i}"})]
            )
            written.put(store, batch)
    finally:
        store.close()
    for path in (root / "index").iterdir():
        path.unlink()
    store, _report = open_store(root, crashed=True)
    try:
        assert_every_key_found_once(store, written)
    finally:
        store.close()


# -- files a crash can leave half-made --------------------------------------------------------------


def test_stale_temporary_files_from_a_crash_during_creation_are_harmless(tmp_path: Path) -> None:
    """Segments are sized under ``<name>.tmp`` and renamed; a crash leaves at most such a file."""
    root = tmp_path / "store"
    written = fill(root, 5)
    end = written.last[2] + written.last[3]
    next_segment = end - end % sc.SEGMENT_BYTES + sc.SEGMENT_BYTES
    (root / "commitlog" / f"{next_segment:020d}.tmp").write_bytes(b"\xff" * 100)
    queue_dir = root / "consumequeue" / TOPIC / "0"
    (queue_dir / f"{sc.CQ_UNITS_PER_FILE * 20:020d}.tmp").write_bytes(b"\xff" * 7)
    (root / "index" / "20000101000000000.tmp").write_bytes(b"")
    store, report = open_store(root, crashed=True)
    try:
        assert report.process_offset == end
        for seq in range(5, 45):  # rolls into the segment whose temporary file was stale
            written.put_seq(store, seq)
        assert len(store.commitlog.queue.files) >= 2
        assert_holds(store, written, written.last[2] + written.last[3])
    finally:
        store.close()
    reopen_and_check(root, written)


def test_writing_segments_never_changes_their_size(tmp_path: Path) -> None:
    root = tmp_path / "store"
    fill(root, 30)
    sizes = {p.stat().st_size for p in (root / "commitlog").iterdir()}
    assert sizes == {sc.SEGMENT_BYTES}
    assert not [p for p in root.rglob("*.tmp")]
    assert os.path.getsize(root / "checkpoint") == 4096


class _Interrupted(Exception):
    """Stands in for a crash in the middle of recovery."""


def test_crash_while_recovery_deletes_segments_leaves_no_hole(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Recovery deletes the segments after the cut newest first, so a crash halfway leaves a
    contiguous run of segments that the next start accepts (a hole would stop every start)."""
    root = tmp_path / "store"
    written = fill(root, 60)
    segments = sorted(int(p.name) for p in (root / "commitlog").iterdir())
    assert len(segments) >= 5
    victim = min(
        (row for row in written.rows if segments[1] <= row[2] < segments[2] and len(row[4]) > 16),
        key=lambda row: row[2],
    )
    start = victim[2]
    zero_from(root, start)  # no intact record after it: everything from here goes
    real_destroy = MappedFile.destroy
    calls = []

    def destroy_then_crash(self: MappedFile) -> None:
        calls.append(self.path.name)
        if len(calls) == 2:
            raise _Interrupted(self.path.name)
        real_destroy(self)

    monkeypatch.setattr(MappedFile, "destroy", destroy_then_crash)
    store = MessageStore(sc.crash_config(root))
    (root / "abort").touch()
    with pytest.raises(_Interrupted):
        store.start()
    store.close()  # not running: only releases the directory lock
    for mapped in store.commitlog.queue.files:
        mapped.close()
    monkeypatch.setattr(MappedFile, "destroy", real_destroy)
    left = sorted(int(p.name) for p in (root / "commitlog").iterdir() if p.name.isdigit())
    assert left == segments[: len(left)], "a hole in the segment names"
    store, report = open_store(root, crashed=True)
    try:
        assert report.process_offset == start
        assert_holds(store, written, start)
    finally:
        store.close()


def test_an_index_put_killed_before_its_header_keeps_the_older_keys_of_its_slots(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A kill between an index put's entries (and slot heads) and its header leaves heads naming
    entries past the header's count; start-up must point them back at the newest counted entry,
    or every older key of those slots is lost to queries (and the next put chains past them)."""
    directory, slots, stamp = tmp_path / "index", 4, 1_700_000_000_000
    service = IndexService(directory, slots, 64)
    service.load()
    counted = {4: 100, 8: 200, 12: 300, 5: 400}  # hashes 4, 8, 12 share slot 0; 5 is alone in slot 1
    service.put(list(counted), list(counted.values()), [stamp] * len(counted))
    # the killed put: its entries and slot heads are in the page cache, its header never came
    service.files[-1].put_plain([16, 9, 20], [500, 600, 700], [stamp] * 3)
    service.close()

    service = IndexService(directory, slots, 64)
    service.load()  # what MessageStore.start does
    (index,) = service.files
    try:
        assert ": 2 slot heads named entries a killed put never counted" in caplog.text
        assert index.index_count == 1 + len(counted)
        for key_hash, offset in counted.items():
            assert index.select(key_hash, 8, 0, 2 * stamp) == [offset], key_hash
        assert index.select(16, 8, 0, 2 * stamp) == []  # never counted: recovery dispatches it again
        service.put([16, 9, 20], [500, 600, 700], [stamp] * 3)  # as the replay does
        for key_hash, offset in {**counted, 16: 500, 9: 600, 20: 700}.items():
            assert index.select(key_hash, 8, 0, 2 * stamp) == [offset], key_hash
    finally:
        service.close()


def test_a_recovery_cut_keeps_the_index_keys_of_the_records_before_it(tmp_path: Path) -> None:
    """After a machine crash the index can name records past the recovered CommitLog end; recovery
    forgets those entries only, not the whole newest file with the keys of records that survived."""
    directory, slots, stamp = tmp_path / "index", 4, 1_700_000_000_000
    service = IndexService(directory, slots, 64)
    service.load()
    survived = {4: 100, 8: 200, 12: 300, 5: 400}  # hashes 4, 8, 12, 16 share slot 0
    service.put([*survived, 16, 9], [*survived.values(), 500, 600], [stamp] * 6)
    service.truncate_after(450)  # what Recovery.run does with the end it recovered
    service.put([16, 13], [450, 470], [stamp + 5_000] * 2)  # records written after the cut
    expected = {**survived, 16: 450, 13: 470, 9: None}
    for reopen in (False, True):
        if reopen:
            service.close()
            service = IndexService(directory, slots, 64)
            service.load()
        (index,) = service.files
        for key_hash, offset in expected.items():
            assert index.select(key_hash, 8, 0, 2 * stamp) == ([] if offset is None else [offset]), key_hash
        assert index.end_phy_offset == 470
    service.close()
