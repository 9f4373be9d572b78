"""MappedFile, ConsumeQueue and MapPool's state: positions take any int (numpy's too), ``_mmap`` is
the mapping or None (a held view keeps it, a closed segment refuses to map again), and the map
pool's order of eviction follows each segment's ``tick``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sparkmq.errors import StoreError
from sparkmq.store.consume_queue import ConsumeQueue
from sparkmq.store.mapped_file import MappedFile, MapPool


def test_fields_take_any_int(tmp_path: Path) -> None:
    segment = MappedFile(tmp_path / "00000000000000001024", 4096)
    assert (segment.start_offset, segment.file_bytes, segment.write_position) == (1024, 4096, 0)
    segment.write_position = np.int64(40)  # numpy's ints, as the store's columns hand out
    segment.flushed_position = 20
    assert (segment.write_position, segment.flushed_position, segment.remaining) == (40, 20, 4056)
    segment.append(b"abc")
    assert segment.read(40, 3) == b"abc" and segment.write_position == 43
    segment.close()


def test_queue_end_and_files(tmp_path: Path) -> None:
    queue = ConsumeQueue("TopicA", 2, tmp_path, 16)
    assert queue.max_physical_offset == -1
    queue.append(0, [0, 64], [64, 80], [0, 0])
    assert queue.max_physical_offset == 144 and queue.max_offset == 2
    queue.max_physical_offset = np.int64(2**40)
    assert queue.max_physical_offset == 2**40
    queue.close()


def test_an_unmapped_segment_maps_again_but_a_closed_one_refuses(tmp_path: Path) -> None:
    segment = MappedFile(tmp_path / "00000000000000000000", 4096)
    segment.append(b"kept")
    assert segment.try_unmap() and segment._mmap is None
    assert segment.read(0, 4) == b"kept" and segment._mmap is not None
    with segment.view():  # a held view keeps the mapping
        assert not segment.try_unmap() and segment._mmap is not None
        with pytest.raises(BufferError):
            segment.close()
        assert segment._mmap is not None
    segment.close()
    assert segment._mmap is None
    with pytest.raises(StoreError, match="closed"):
        segment.read(0, 4)


def test_the_pool_unmaps_the_least_recently_used(tmp_path: Path) -> None:
    pool = MapPool(4)  # mapping a fifth unmaps the idlest one and a quarter more: 4 // 16 = 0
    segments = [MappedFile(tmp_path / f"{i:020d}", 4096, pool=pool) for i in range(4)]
    for segment in (segments[2], segments[0], segments[3], segments[1]):
        segment.append(b"x")  # uses, in this order: 2 is now the idlest
    fifth = MappedFile(tmp_path / f"{4:020d}", 4096, pool=pool)
    assert [s._mmap is None for s in segments] == [False, False, True, False]
    assert pool.mapped == 4
    segments[2].append(b"y")  # maps it again: now 0 is the idlest
    assert [s._mmap is None for s in segments] == [True, False, False, False]
    for segment in [*segments, fifth]:
        segment.close()
    assert pool.mapped == 0
