"""The lone put's C step against the Python steps it replaces, byte for byte on real files.

``IndexService.put_lane`` (the group writes its index entries into the newest file's mapping,
handed over per call) against ``IndexService.put`` of ``index_entries()``: the files, the index
files' fields and what each returns must agree, from the same starting state (an index file
empty, partly full, about to fill, replayed past the group). A mapping closed behind the store's
back is an error, never a write.
"""

from __future__ import annotations

import mmap
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkmq import native
from sparkmq.store.index_service import IndexService
from sparkmq.store.mapped_file import MappedFile
from support.native_lane import scan, send_frame

if native.sendlane is None:
    pytest.skip("the C send lane is not in use (not built, or SPARKMQ_NATIVE=0)", allow_module_level=True)

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


def test_a_mapping_closed_behind_the_stores_back_is_an_error_not_a_write(tmp_path: Path) -> None:
    """The group's C holds a mapping only while the call holds its buffer export: a mapping closed
    without its owner's reset (the forgotten ``_mmap = None``) fails the write (the index entries:
    the buffer argument is refused; the CommitLog copy: ValueError), and nothing is written."""
    group = group_of([("TopicA", 0, "k1")])
    group.place(200, STAMP, [0])
    path = tmp_path / "index"
    path.write_bytes(bytes(40 + 4 * SLOTS + 20 * 16))
    with path.open("r+b") as file:
        mapping = mmap.mmap(file.fileno(), 0)
    mapping.close()
    with pytest.raises(TypeError, match="read-write bytes-like"):
        group.index_into(mapping, SLOTS, 1, STAMP, None, 0, STAMP)
    assert path.read_bytes() == bytes(40 + 4 * SLOTS + 20 * 16)
    segment = MappedFile(tmp_path / f"{0:020d}", 4096)
    closed = segment._mmap
    assert closed is not None
    closed.close()
    with pytest.raises(ValueError, match="closed"):
        segment.append(group.place(0, STAMP, [0]))
    assert segment.write_position == 0
