"""``_queueread.index_put`` writes what ``IndexFile.put_plain`` (the reference) writes.

Two real index files start from the same bytes (slot heads that name entries written before,
stale heads past the file's count, empty slots) and take the same batch, one through each path:
the files' bytes and their count of used slots must agree.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkmq.store.index_file import HEADER_BYTES, SLOT_BYTES, IndexFile

_queueread = pytest.importorskip("sparkmq.native._queueread")

SLOTS, ENTRIES = 7, 96
BEGIN = 1_700_000_000_000


@st.composite
def batches(draw: st.DrawFn) -> tuple[int, int, list[int], list[int], list[int], list[int]]:
    before = draw(st.integers(1, 40))
    begin = draw(st.sampled_from([0, BEGIN]))
    heads = draw(st.lists(st.integers(-3, before + 5), min_size=SLOTS, max_size=SLOTS))
    count = draw(st.integers(0, ENTRIES - before))
    hashes = draw(st.lists(st.integers(0, 2**31 - 1), min_size=count, max_size=count))
    offsets = sorted(draw(st.lists(st.integers(0, 2**62), min_size=count, max_size=count)))
    stamps = draw(st.lists(st.integers(BEGIN - 5_000, BEGIN + (2**31 + 5) * 1000), min_size=count, max_size=count))
    return before, begin, heads, hashes, offsets, stamps


def _index(root: Path, name: str, before: int, begin: int, heads: list[int]) -> IndexFile:
    index = IndexFile(root / name, SLOTS, ENTRIES, begin)
    for slot, head in enumerate(heads):
        index._mmap[HEADER_BYTES + slot * SLOT_BYTES : HEADER_BYTES + (slot + 1) * SLOT_BYTES] = head.to_bytes(
            4, "big", signed=True
        )
    index.index_count = before
    return index


@settings(max_examples=300, deadline=None)
@given(batches())
def test_index_put_writes_what_put_plain_writes(batch: tuple[int, int, list[int], list[int], list[int], list[int]]):
    before, begin, heads, hashes, offsets, stamps = batch
    with tempfile.TemporaryDirectory() as root:
        reference = _index(Path(root), "reference", before, begin, heads)
        native = _index(Path(root), "native", before, begin, heads)
        try:
            reference.put_plain(hashes, offsets, stamps)
            fresh = _queueread.index_put(native._mmap, SLOTS, before, native.begin_timestamp, hashes, offsets, stamps)
            assert native.hash_slot_count + fresh == reference.hash_slot_count
            assert native._mmap[:] == reference._mmap[:]
        finally:
            reference.close()
            native.close()


def test_index_put_refuses_what_does_not_fit() -> None:
    mapping = bytearray(HEADER_BYTES + SLOTS * SLOT_BYTES + 4 * 20)
    assert _queueread.index_put(mapping, SLOTS, 1, 0, [5, 12], [1, 2], [0, 0]) == 1  # one slot, chained
    with pytest.raises(ValueError, match="do not fit"):
        _queueread.index_put(mapping, SLOTS, 3, 0, [5, 6], [1, 2], [0, 0])
    with pytest.raises(ValueError, match="length"):
        _queueread.index_put(mapping, SLOTS, 1, 0, [5], [1, 2], [0])
    with pytest.raises(OverflowError):
        _queueread.index_put(mapping, SLOTS, 1, 0, [2**31], [1], [0])


class _Shrinks:
    """An index column item whose ``__index__`` cuts every column down to its first item."""

    def __init__(self, *columns: list[object]) -> None:
        self.columns = columns

    def __index__(self) -> int:
        for column in self.columns:
            del column[1:]
        return 5


@pytest.mark.parametrize("column", [0, 1, 2])
def test_index_put_refuses_columns_that_shrink_while_read(column: int) -> None:
    """Python run by an item's ``__index__`` may shrink the lists: a clear error, nothing written."""
    count = 40  # the lists' storage shrinks too, and their items are ints of their own, freed when dropped
    mapping = bytearray(HEADER_BYTES + SLOTS * SLOT_BYTES + (count + 1) * 20)
    columns: list[list[object]] = [[100_000 + k * base for k in range(count)] for base in (1, 7, 11)]
    columns[column][0] = _Shrinks(*columns)
    with pytest.raises(ValueError, match="changed while it was read"):
        _queueread.index_put(mapping, SLOTS, 1, 0, *columns)
    assert not any(mapping)
