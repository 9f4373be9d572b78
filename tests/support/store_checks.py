"""Helpers for the crash and torn-tail tests: deterministic batches and a full consistency check.

Not a test module (no ``test_`` prefix). ``crash_writer.py`` imports it as a sibling script
module; the tests load it by path because ``tests/store`` is not a package.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from sparkmq.message import MessageBatch, StoredMessage, decode_record, encode_properties, iter_records
from sparkmq.message import layout as L
from sparkmq.store import FlushDiskType, GetMessageStatus, MessageStore, StoreConfig

TOPIC = "CrashT"
QUEUES = 3
SEGMENT_BYTES = 48 * 1024  # CommitLog segments: a few batches each, so rolls happen often
CQ_UNITS_PER_FILE = 64


def crash_config(root: Path, **overrides: object) -> StoreConfig:
    """Tiny segments, SYNC flush, a busy ConsumeQueue/checkpoint flush, no retention."""
    settings: dict[str, object] = dict(
        commitlog_file_bytes=SEGMENT_BYTES,
        consume_queue_units_per_file=CQ_UNITS_PER_FILE,
        index_hash_slots=128,
        index_entries=1000,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        flush_interval_consume_queue_ms=50,
        delete_when="",
        disk_max_used_space_ratio=1.0,
        max_mapped_consume_queue_files=2,  # crashes land while ConsumeQueue files are unmapped and mapped again
    )
    settings.update(overrides)
    return StoreConfig(root, **settings)


@dataclass(frozen=True)
class Expected:
    """What batch ``seq`` holds: its queue, bodies and encoded properties."""

    seq: int
    queue_id: int
    bodies: list[bytes]
    properties: list[bytes]

    def batch(self) -> MessageBatch:
        return MessageBatch(
            TOPIC, self.queue_id, self.bodies, self.properties, born_timestamp=1_700_000_000_000 + self.seq
        )


def expected_batch(seed: int, seq: int, max_count: int = 20, max_body: int = 2000) -> Expected:
    """The batch number ``seq`` of a run seeded ``seed``: 1..max_count messages, bodies 0..max_body bytes."""
    rng = random.Random(f"{seed}/{seq}")
    queue_id = rng.randrange(QUEUES)
    count = rng.randint(1, max_count)
    bodies = [rng.randbytes(rng.randint(0, max_body)) for _ in range(count)]
    props = []
    for i in range(count):
        fields = {"SEQ": f"{seq}:{i}", "KEYS": f"k{seq}_{i} shared{seq % 7}", "UNIQ_KEY": f"U{seq:09d}{i:02d}"}
        tag = rng.choice(["TagA", "TagB", ""])
        if tag:
            fields["TAGS"] = tag
        props.append(encode_properties(fields))
    return Expected(seq, queue_id, bodies, props)


def seq_of(message: StoredMessage) -> tuple[int, int]:
    """(seq, index in batch) from a stored message's SEQ property."""
    seq, index = message.properties["SEQ"].split(":")
    return int(seq), int(index)


@dataclass
class Walk:
    """Every valid record of the CommitLog in log order, and where the valid data ends."""

    records: list[StoredMessage]
    end: int


def walk_commitlog(store: MessageStore) -> Walk:
    """Walk every segment independently of the store's own scan; fail on anything odd.

    Non-last segments must be records followed by an END_OF_FILE filler that reaches the
    segment end exactly; the last one must be records then zeros to the end of the file.
    """
    files = store.commitlog.queue.files
    records: list[StoredMessage] = []
    end = store.commitlog.min_offset
    for number, mapped in enumerate(files):
        data = mapped.read(0, mapped.file_bytes)
        last = number == len(files) - 1
        pos = 0
        while True:
            assert pos + 8 <= mapped.file_bytes, f"segment {mapped.path.name} ends without a filler at {pos}"
            size = int.from_bytes(data[pos : pos + 4], "big", signed=True)
            magic = int.from_bytes(data[pos + 4 : pos + 8], "big", signed=True)
            if magic == L.BLANK_MAGIC_CODE:
                assert size == mapped.file_bytes - pos, f"filler of {size} bytes at {pos} does not reach the end"
                end = mapped.end_offset  # a full last segment: the next append opens a new one
                break
            if size == 0 and magic == 0:
                assert last, f"segment {mapped.path.name} (not the last) has zeros at {pos}"
                assert not any(data[pos:]), f"bytes after the valid end {mapped.start_offset + pos} are not zero"
                end = mapped.start_offset + pos
                break
            message = decode_record(data, pos, check_crc=True)
            assert message.physical_offset == mapped.start_offset + pos
            records.append(message)
            pos += message.total_size
            end = mapped.start_offset + pos
    return Walk(records, end)


def read_queue_all(store: MessageStore, topic: str, queue_id: int, chunk: int = 200) -> list[StoredMessage]:
    """Every message of a queue through ``get_messages``, decoded with CRC checks."""
    messages: list[StoredMessage] = []
    offset = store.min_offset_in_queue(topic, queue_id)
    while True:
        got = store.get_messages("checker", topic, queue_id, offset, chunk, max_bytes=1 << 30)
        if got.status is not GetMessageStatus.FOUND:
            assert got.status in (
                GetMessageStatus.OFFSET_OVERFLOW_ONE,
                GetMessageStatus.NO_MESSAGE_IN_QUEUE,
                GetMessageStatus.NO_MATCHED_LOGIC_QUEUE,
            ), got.status
            return messages
        batch = list(iter_records(got.body(), check_crc=True))
        assert [m.queue_offset for m in batch] == got.queue_offsets.tolist()
        assert [m.physical_offset for m in batch] == got.physical_offsets.tolist()
        messages.extend(batch)
        offset = got.next_begin_offset


def check_consistent(
    store: MessageStore, topics: dict[str, int] | None = None
) -> dict[tuple[str, int], list[StoredMessage]]:
    """Assert CommitLog, ConsumeQueues and reads agree; return every queue's messages.

    * the CommitLog is whole records (CRC-checked) up to ``max_offset``, zeros after;
    * each ConsumeQueue is dense from 0, and unit k points at a record of that topic/queue
      with queue offset k and the unit's size;
    * every record of the CommitLog is in exactly one ConsumeQueue, and no unit points past
      the valid end;
    * ``get_messages`` returns exactly those records.
    """
    walk = walk_commitlog(store)
    assert store.commitlog.max_offset == walk.end
    by_offset = {m.physical_offset: m for m in walk.records}
    seen: set[int] = set()
    result: dict[tuple[str, int], list[StoredMessage]] = {}
    queue_ids = store.queue_ids()
    for topic, ids in queue_ids.items():
        for queue_id in ids:
            cq = store.consume_queue(topic, queue_id)
            assert cq is not None
            assert cq.min_offset == 0, f"{topic}/{queue_id} starts at {cq.min_offset}"
            units = cq.read_units(0, cq.max_offset)
            assert len(units) == cq.max_offset
            for k, unit in enumerate(units.tolist()):
                offset, size, _tags = unit
                assert offset + size <= walk.end, f"{topic}/{queue_id}@{k} points past the end {walk.end}"
                message = by_offset.get(offset)
                assert message is not None, f"{topic}/{queue_id}@{k} points at {offset}, no record starts there"
                assert (message.topic, message.queue_id, message.queue_offset, message.total_size) == (
                    topic,
                    queue_id,
                    k,
                    size,
                )
                assert offset not in seen
                seen.add(offset)
            messages = read_queue_all(store, topic, queue_id)
            assert [m.physical_offset for m in messages] == units["offset"].tolist()
            assert store.max_offset_in_queue(topic, queue_id) == len(messages)
            result[(topic, queue_id)] = messages
    assert seen == set(by_offset), "CommitLog records missing from every ConsumeQueue"
    if topics is not None:
        for topic, count in topics.items():
            assert sorted(i for t, i in result if t == topic) == list(range(count))
    return result
