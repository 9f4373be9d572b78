"""Bulk property lookup: one property's value in every record of a batch, as buffer slices.

``PropertyTable(properties)`` joins a batch's encoded properties strings once
(``b"\\x02" + b"\\x02".join(properties)``: every item, including each record's first, then
follows a ``0x02``) and finds the item starts. ``values(key)`` locates ``key``'s value in
each record as ``(row, start, length)`` slices of that buffer and ``tokens(key)`` splits
them at spaces (``KEYS``), with numpy and no per-record Python objects. Hash the slices
with ``java_hashes_of_slices``.

The plain reference is ``find_property`` record by record; ``values`` agrees with it: only
items that start with ``key + 0x01`` count (``MYTAGS`` is not ``TAGS``), empty values are
absent, and when a record repeats the key its last non-empty value wins.

>>> table = PropertyTable([b"TAGS\\x01A\\x02TAGS\\x01B", b"KEYS\\x01x y"])
>>> table.column(b"TAGS")
[b'B', None]
>>> [table.joined[s : s + n] for s, n in zip(*table.tokens(b"KEYS")[1:])]
[b'x', b'y']
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import pairwise
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

_ITEM_SEPARATOR = 2
_SPACE = 0x20
_Int64s = npt.NDArray[np.int64]


class Slices(NamedTuple):
    """Values as slices of ``PropertyTable.joined``: record ``rows[i]`` holds ``joined[starts[i]:][:lengths[i]]``."""

    rows: _Int64s
    starts: _Int64s
    lengths: _Int64s


class PropertyTable:
    """The properties strings of a batch joined once, for column-wise lookups."""

    def __init__(self, properties: Sequence[bytes]) -> None:
        self.count = len(properties)
        self.joined = b"\x02" + b"\x02".join(properties)
        self.data: npt.NDArray[np.uint8] = np.frombuffer(self.joined, dtype=np.uint8)
        lengths = np.fromiter(map(len, properties), dtype=np.int64, count=self.count)
        # The 0x02 in front of record i sits at record_seps[i]; its bytes follow it.
        self.record_seps: _Int64s = np.cumsum(lengths + 1) - (lengths + 1)
        self._seps: _Int64s = np.flatnonzero(self.data == _ITEM_SEPARATOR).astype(np.int64)
        self._item_ends: _Int64s = np.append(self._seps[1:], len(self.data))  # each item ends at the next 0x02
        self._words: npt.NDArray[np.uint64] | None = None
        self._words_pad = 0

    def _words_at(self, positions: _Int64s, width: int) -> npt.NDArray[np.uint64]:
        """The 8 bytes at each position as a little-endian uint64 (zero past the end)."""
        if self._words is None or self._words_pad < width + 8:
            self._words_pad = max(width + 8, 64)
            padded = self.joined + bytes(self._words_pad)
            # One uint64 per byte position (stride 1): a gather reads 8 bytes in one go.
            self._words = np.ndarray((len(padded) - 7,), dtype="<u8", buffer=padded, strides=(1,))
        return self._words[positions]

    def find(self, keys: Sequence[bytes]) -> list[Slices]:
        """``values(key)`` of several keys in one scan over the items: one ``Slices`` per key."""
        seps = self._seps
        words: dict[int, npt.NDArray[np.uint64]] = {}  # item byte offset -> the 8 bytes there, per item
        kind = np.zeros(len(seps), dtype=np.int8)  # 1 + index of the key an item holds, 0 for none
        key_lens = [0]
        for number, key in enumerate(keys, start=1):
            needle = key + b"\x01"
            key_lens.append(len(needle))
            # Compare 8 bytes at a time (the last chunk may overlap the one before). A match
            # never runs across a 0x02 (needles hold none) nor into the zero padding (needles
            # end in 0x01).
            match: npt.NDArray[np.bool_] | None = None
            for offset in [*range(0, len(needle) - 8, 8), max(len(needle) - 8, 0)]:
                chunk = needle[offset : offset + 8]
                if offset not in words:
                    words[offset] = self._words_at(seps + 1 + offset, offset + 8)
                got = words[offset]
                if len(chunk) < 8:
                    got = got & np.uint64((1 << 8 * len(chunk)) - 1)
                hit = got == np.uint64(int.from_bytes(chunk, "little"))
                match = hit if match is None else match & hit
            kind[match] = number
        items = np.flatnonzero(kind)
        kinds = kind[items]
        item_seps = seps[items]
        starts = item_seps + 1 + np.array(key_lens, dtype=np.int64)[kinds]
        lengths = self._item_ends[items] - starts
        rows = np.searchsorted(self.record_seps, item_seps, side="right") - 1
        # Group by key (stable: each group stays in buffer order, so rows ascend), drop
        # empty values, keep the last value of each (key, record).
        if len(items) and int(lengths.min()) <= 0:
            nonempty = np.flatnonzero(lengths > 0)
            order = nonempty[np.argsort(kinds[nonempty], kind="stable")]
        else:
            order = np.argsort(kinds, kind="stable")
        kinds, rows, starts, lengths = kinds[order], rows[order], starts[order], lengths[order]
        if len(order):
            last = np.append((rows[1:] != rows[:-1]) | (kinds[1:] != kinds[:-1]), True)
            if not last.all():  # some record holds a key twice
                kinds, rows, starts, lengths = kinds[last], rows[last], starts[last], lengths[last]
        bounds = np.searchsorted(kinds, np.arange(1, len(keys) + 2)).tolist()
        return [Slices(rows[a:b], starts[a:b], lengths[a:b]) for a, b in pairwise(bounds)]

    def values(self, key: bytes) -> Slices:
        """The last non-empty value of ``key`` in each record that has one, in record order."""
        return self.find([key])[0]

    def tokens(self, key: bytes) -> Slices:
        """``values(key)`` split at spaces, empty tokens dropped, in record then position order."""
        return self.split(self.values(key))

    def split(self, values: Slices, separator: int = _SPACE) -> Slices:
        """Split value slices at ``separator`` bytes; empty tokens are dropped."""
        rows, starts, lengths = values
        if not len(rows) or not self._holds(separator):
            return values
        ends = np.cumsum(lengths)
        offsets = ends - lengths
        total = int(ends[-1])
        within = np.arange(total, dtype=np.int64)
        positions = within + np.repeat(starts - offsets, lengths)  # buffer position of each value byte
        text = self.data[positions] != separator
        if text.all():
            return values
        first = np.zeros(total, dtype=bool)
        first[offsets] = True
        last = np.zeros(total, dtype=bool)
        last[ends - 1] = True
        begins = np.flatnonzero(text & (first | np.append(True, ~text[:-1])))
        stops = np.flatnonzero(text & (last | np.append(~text[1:], True)))
        return Slices(rows[np.searchsorted(ends, begins, side="right")], positions[begins], stops - begins + 1)

    def _holds(self, byte: int) -> bool:
        """Whether ``byte`` occurs anywhere in the buffer (skips splitting when it does not)."""
        return self.joined.find(bytes([byte])) >= 0

    def column(self, key: bytes) -> list[bytes | None]:
        """``values(key)`` as one bytes-or-None per record (tests and small callers)."""
        found: list[bytes | None] = [None] * self.count
        for row, start, length in zip(*(a.tolist() for a in self.values(key)), strict=True):
            found[row] = self.joined[start : start + length]
        return found
