"""Damaged ConsumeQueue units are found by the read that meets them, reported once, and repaired
from the CommitLog: every message stays readable, on the native walk and on the numpy path alike."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkmq.message import layout as L
from sparkmq.store import GetMessageStatus, MessageStore, reads
from support.store_damage import UNIT_KINDS, damage_bytes, damage_unit, read_unit, unit_path
from support.store_data import make_batch, retained_store, tiny_config

UNITS_PER_FILE = 32


@pytest.fixture(params=["native", "numpy"])
def damaged_store(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[MessageStore]:
    """Two queues of 100 messages each, interleaved, on the native read or the numpy one."""
    if request.param == "numpy":
        monkeypatch.setattr(reads, "queueread", None)
    elif reads.queueread is None:
        pytest.skip("the native extensions are off or not built")
    store = MessageStore(tiny_config(tmp_path / "store", consume_queue_units_per_file=UNITS_PER_FILE))
    store.start()
    for start in range(0, 100, 10):
        for queue_id in (0, 1):
            assert store.put_messages(make_batch("T", queue_id, 10, start=start)).ok
    try:
        yield store
    finally:
        store.close()


def _read_all(store: MessageStore, queue_id: int = 0) -> list[tuple[int, bytes]]:
    """(queue offset, record bytes) of every message of the queue, pulled 16 at a time."""
    records: list[tuple[int, bytes]] = []
    offset = 0
    while True:
        result = store.get_messages("G", "T", queue_id, offset, 16)
        if result.status is not GetMessageStatus.FOUND:
            assert result.status in (GetMessageStatus.OFFSET_OVERFLOW_ONE, GetMessageStatus.NO_MATCHED_MESSAGE)
            if result.next_begin_offset == offset:
                return records
        body, at = result.body() if result.buffers else b"", 0
        for queue_offset, size in zip(result.queue_offsets.tolist(), result.sizes.tolist(), strict=True):
            records.append((queue_offset, body[at : at + size]))
            at += size
        offset = result.next_begin_offset


def _unit(store: MessageStore, queue_offset: int, queue_id: int = 0) -> tuple[Path, int]:
    return unit_path(store.store_dir, "T", queue_id, queue_offset, UNITS_PER_FILE * 20)


@pytest.mark.parametrize("kind", UNIT_KINDS)
def test_a_damaged_unit_is_repaired_and_every_message_read(damaged_store: MessageStore, kind: str) -> None:
    before = _read_all(damaged_store)
    path, position = _unit(damaged_store, 41)
    intact = damage_unit(path, position, kind)
    assert _read_all(damaged_store) == before
    assert read_unit(path, position) == intact
    assert damaged_store.damage.counts() == {("consumequeue", "repaired"): 1}
    assert _read_all(damaged_store) == before and damaged_store.damage.counts()[("consumequeue", "repaired")] == 1


def test_runs_of_damaged_units_and_the_last_unit_are_repaired(damaged_store: MessageStore) -> None:
    before = _read_all(damaged_store)
    damaged = [10, 11, 12, 31, 32, 99]  # a run, a run across a file boundary, the queue's last unit
    intact = {q: damage_unit(*_unit(damaged_store, q), "negative_size") for q in damaged}
    assert _read_all(damaged_store) == before
    assert {q: read_unit(*_unit(damaged_store, q)) for q in damaged} == intact
    assert damaged_store.damage.counts() == {("consumequeue", "repaired"): len(damaged)}
    assert [q for q, _ in _read_all(damaged_store, 1)] == list(range(100))


def test_a_unit_whose_record_cannot_be_found_is_reported_lost_and_skipped(damaged_store: MessageStore) -> None:
    """Its record's head is damaged too: the unit becomes a blank, the read goes on past it."""
    before = _read_all(damaged_store)
    path, position = _unit(damaged_store, 50)
    physical = int.from_bytes(read_unit(path, position)[:8], "big")
    damage_unit(path, position, "negative_size")
    segment_bytes = damaged_store.config.commitlog_file_bytes
    segment = damaged_store.store_dir / "commitlog" / f"{physical - physical % segment_bytes:020d}"
    damage_bytes(segment, physical % segment_bytes + L.POS_MAGIC, b"\0\0\0\0")
    assert _read_all(damaged_store) == [record for record in before if record[0] != 50]
    assert damaged_store.damage.counts() == {("consumequeue", "lost"): 1}


@pytest.mark.parametrize("field", ["topic_length", "body_length", "properties_length"])
def test_a_record_whose_lengths_do_not_add_up_is_skipped_and_reported_lost(
    damaged_store: MessageStore, field: str
) -> None:
    """The unit and the record's head are intact, but a length inside the record is not: the record is
    never served (a consumer's decode would fail on it); its unit becomes a blank, the read goes on."""
    before = _read_all(damaged_store)
    path, position = _unit(damaged_store, 50)
    physical = int.from_bytes(read_unit(path, position)[:8], "big")
    segment_bytes = damaged_store.config.commitlog_file_bytes
    segment = damaged_store.store_dir / "commitlog" / f"{physical - physical % segment_bytes:020d}"
    at = physical % segment_bytes
    body_length = int.from_bytes(segment.read_bytes()[at + L.POS_BODY_LENGTH : at + L.POS_BODY], "big")
    topic_at = at + L.POS_BODY + body_length
    where, data = {
        "topic_length": (topic_at, b"\x7f"),
        "body_length": (at + L.POS_BODY_LENGTH, (body_length + 3).to_bytes(4, "big")),
        "properties_length": (topic_at + 1 + len(b"T"), b"\xff\xf0"),
    }[field]
    damage_bytes(segment, where, data)
    assert _read_all(damaged_store) == [record for record in before if record[0] != 50]
    assert damaged_store.damage.counts() == {("consumequeue", "lost"): 1}
    assert read_unit(path, position)[8:12] == (2**31 - 1).to_bytes(4, "big")  # a blank unit


def test_a_unit_naming_another_topics_record_is_repaired(damaged_store: MessageStore) -> None:
    """The unit names a record of topic U whose queue id, queue offset and offset all match what the unit
    says: only its topic tells it apart. It is never served under T; the unit is rebuilt from T's record."""
    for start in range(0, 100, 10):
        assert damaged_store.put_messages(make_batch("U", 0, 10, start=start)).ok
    before = _read_all(damaged_store)
    path, position = _unit(damaged_store, 41)
    other = read_unit(*unit_path(damaged_store.store_dir, "U", 0, 41, UNITS_PER_FILE * 20))
    intact = damage_bytes(path, position, other)
    assert _read_all(damaged_store) == before
    assert read_unit(path, position) == intact
    assert damaged_store.damage.counts() == {("consumequeue", "repaired"): 1}


@pytest.mark.parametrize("kind", UNIT_KINDS)
def test_a_damaged_unit_survives_a_restart_as_damage_not_as_the_queue_end(tmp_path: Path, kind: str) -> None:
    """Recovery keeps the units after a damaged one (only a torn tail ends a queue, and its searches
    step over a unit out of order); the read repairs it."""
    config = tiny_config(tmp_path / "store", consume_queue_units_per_file=UNITS_PER_FILE)
    with MessageStore(config) as store:
        for start in range(0, 100, 10):
            assert store.put_messages(make_batch("T", 0, 10, start=start)).ok
        before = _read_all(store)
    for unit in (41, 50, 75):  # 50 and 75: where a binary search over the queue looks first
        damage_unit(*unit_path(config.root_dir, "T", 0, unit, UNITS_PER_FILE * 20), kind)
    with MessageStore(config) as store:
        assert store.max_offset_in_queue("T", 0) == 100
        assert _read_all(store) == before
        assert store.put_messages(make_batch("T", 0, 1, start=100)).queue_offset == 100


@pytest.mark.parametrize("path", ["native", "numpy"])
def test_a_unit_pointing_below_the_commitlog_minimum_after_live_ones_is_repaired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """After retention deleted old segments, a live unit damaged to name a deleted offset is no
    removed record (records go up the log with the queue): it is repaired, not skipped."""
    if path == "numpy":
        monkeypatch.setattr(reads, "queueread", None)
    elif reads.queueread is None:
        pytest.skip("the native extensions are off or not built")
    with retained_store(tmp_path / "s") as store:
        low = store.min_offset_in_queue("T", 0)
        assert store.commitlog.min_offset > 0
        target = low + 40
        before = store.get_messages("G", "T", 0, target, 1).body()
        mapped = store.consume_queue("T", 0).files.find(target * 20)  # type: ignore[union-attr]
        assert mapped is not None
        at = target * 20 - mapped.start_offset
        intact = mapped.read(at, 20)
        mapped.rewrite(at, (0).to_bytes(8, "big") + intact[8:])
        result = store.get_messages("G", "T", 0, target - 3, 8)
        assert result.queue_offsets.tolist() == list(range(target - 3, target + 5))
        assert store.get_messages("G", "T", 0, target, 1).body() == before
        assert mapped.read(at, 20) == intact
        assert store.damage.counts() == {("consumequeue", "repaired"): 1}
