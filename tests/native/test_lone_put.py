"""The lone put's C steps against the Python steps they replace, byte for byte on real files.

``SendGroup.write_into`` (place the records at a CommitLog segment's write position and copy them
in) against ``segment.append(group.place(...))``, and ``IndexService.put_lane`` (the group writes
its index entries into the newest file) against ``IndexService.put`` of ``index_entries()``: the
files, the segment's and index file's fields, and what each returns must agree, from the same
starting state (an empty or partly written segment, one without room, one unmapped by its pool;
an index file empty, partly full, about to fill, replayed past the group).
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkmq import native
from sparkmq.store.index_service import IndexService
from sparkmq.store.mapped_file import MappedFile, MapPool
from support.native_lane import scan, send_frame

if native.sendlane is None:
    pytest.skip("the C send lane is not in use (not built, or SPARKMQ_NATIVE=0)", allow_module_level=True)

SEGMENT_BYTES = 64 * 1024
STAMP = 1_700_000_000_123
SLOTS = 5


def group_of(sends: list[tuple[str, int, str | None]]) -> object:
    """A scanned group of sends (topic, queue id, KEYS or None) with UNIQ_KEYs."""
    frames = []
    for i, (topic, queue, keys) in enumerate(sends):
        properties = f"UNIQ_KEY\x01U{i:04d}\x02WAIT\x01true" + ("" if keys is None else f"\x02KEYS\x01{keys}")
        frames.append(send_frame(i + 1, topic=topic, queue_id=str(queue), properties=properties))
    group = scan(b"".join(frames))
    assert group is not None and group.count == len(sends)
    return group


sends_strategy = st.lists(
    st.tuples(st.sampled_from(["TopicA", "TopicB"]), st.integers(0, 3), st.sampled_from([None, "k1", "k1 k2 k3", "x"])),
    min_size=1,
    max_size=12,
)


def segment_state(segment: MappedFile) -> tuple[object, ...]:
    return segment.write_position, segment.flushed_position, segment.read(0, SEGMENT_BYTES)


@settings(max_examples=150, deadline=None)
@given(sends=sends_strategy, written=st.integers(0, SEGMENT_BYTES), start_offset=st.sampled_from([0, 1 << 30]))
def test_write_into_writes_what_place_and_append_write(
    sends: list[tuple[str, int, str | None]], written: int, start_offset: int
) -> None:
    with tempfile.TemporaryDirectory() as root:
        results = []
        for native in (True, False):
            directory = Path(root) / str(native)
            directory.mkdir()
            segment = MappedFile(directory / f"{start_offset:020d}", SEGMENT_BYTES)
            segment.write_position = written
            group = group_of(sends)
            bases = [3 * k for k in range(len(group.keys))]
            fits = written + group.record_bytes <= SEGMENT_BYTES
            if native:
                start = group.write_into(segment, STAMP, bases)
                assert (start is None) == (not fits)
                if start is None:  # declined: nothing placed or written
                    with pytest.raises(RuntimeError, match="not placed"):
                        group.index_entries()
            elif fits:
                start = start_offset + written
                assert segment.append(group.place(start, STAMP, bases)) == written
            else:
                start = None
            placed = (group.index_entries(), group.queue_units(), group.answers()) if start is not None else None
            results.append((start, placed, segment_state(segment)))
            segment.close()
        assert results[0] == results[1]


def test_write_into_declines_an_unmapped_segment_and_touches_a_pooled_one(tmp_path: Path) -> None:
    pool = MapPool(1)
    first = MappedFile(tmp_path / "00000000000000000000", SEGMENT_BYTES, pool=pool)
    second = MappedFile(tmp_path / f"{SEGMENT_BYTES:020d}", SEGMENT_BYTES, pool=pool)
    first.append(b"x")
    second.append(b"y")  # the pool holds one mapping: the first segment's is gone
    assert first._mmap is None
    group = group_of([("TopicA", 0, None)])
    assert group.write_into(first, STAMP, [0]) is None
    assert first.write_position == 1 and first._mmap is None
    assert group.write_into(second, STAMP, [0]) == SEGMENT_BYTES + 1
    assert second.tick > first.tick  # the write is a use: the pool keeps the segment it went to
    assert second.read(1, group.record_bytes) == group.place(SEGMENT_BYTES + 1, STAMP, [0])
    first.close()
    second.close()


def index_state(service: IndexService) -> list[tuple[object, ...]]:
    return [
        (
            index.path.name,
            index.begin_timestamp,
            index.end_timestamp,
            index.begin_phy_offset,
            index.end_phy_offset,
            index.hash_slot_count,
            index.index_count,
            index._mmap[:],
        )
        for index in service.files
    ]


@settings(max_examples=150, deadline=None)
@given(
    sends=sends_strategy,
    entries=st.integers(4, 40),
    before=st.lists(st.integers(0, 9), max_size=30),
    start=st.integers(0, 2000),
    stamp_shift=st.sampled_from([-5_000, 0, 999, 1_000, 3_600_000]),
)
def test_put_lane_indexes_what_put_of_the_entries_indexes(
    sends: list[tuple[str, int, str | None]], entries: int, before: list[int], start: int, stamp_shift: int
) -> None:
    """``before``: entries already put (hash, at offsets 100, 200, ...); the group starts at ``start``
    (below the last of them: a replay, which ``put`` skips or sorts)."""
    with tempfile.TemporaryDirectory() as root:
        results = []
        for native in (True, False):
            service = IndexService(Path(root) / str(native), SLOTS, entries)
            service.load()
            for i, key_hash in enumerate(before):
                service.put([key_hash * 7919], [100 * (i + 1)], [STAMP + 1_000 * i])
            group = group_of(sends)
            group.place(start, STAMP + stamp_shift, [0] * len(group.keys))
            if native:
                finished = service.put_lane(group, start, STAMP + stamp_shift)
            else:
                hashes, offsets = group.index_entries()
                finished = service.put(hashes, offsets, [STAMP + stamp_shift] * len(hashes))
            results.append((finished, [row[1:] for row in index_state(service)]))
            service.close()
        assert results[0] == results[1]
