"""Find a few properties' values in many properties strings at once, with numpy, no per-record Python.

The strings lie back to back in one buffer (``data[offsets[i]:offsets[i+1]]`` is record ``i``'s
``name\\x01value\\x02name\\x01value...``). Items start at a string's start or after a ``\\x02``;
the first 8 bytes of every item, read as one uint64 each, are compared with ``name\\x01`` (its
further bytes one at a time); a value runs to the next ``\\x02`` or the string's end. The plain reference
is ``properties.decode_properties`` per record; tests check both agree, the last occurrence of a
name winning and an empty value counting as absent, as there.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from sparkmq.message.bulk import at_every_byte
from sparkmq.message.properties import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR

_NAME_END = ord(NAME_VALUE_SEPARATOR)
_ITEM_END = ord(PROPERTY_SEPARATOR)
_WORD = 8  # bytes of a key compared at once, as one uint64
Span = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]


def find_values(data: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64], names: tuple[str, ...]) -> list[Span]:
    """Per name, (start in ``data``, length) of its value in each of the ``len(offsets) - 1`` strings;
    length -1 (and the string's start) where the string has no such property or its value is empty.

    >>> data = np.frombuffer(b"TAGS\\x01a\\x02KEYS\\x01k1 k2" b"KEYS\\x01x", dtype=np.uint8)
    >>> (tags_at, tags_len), (keys_at, keys_len) = find_values(data, np.array([0, 17, 23]), ("TAGS", "KEYS"))
    >>> tags_len.tolist(), keys_at.tolist(), keys_len.tolist()
    ([1, -1], [12, 22], [5, 1])
    """
    count = len(offsets) - 1
    items_end = np.flatnonzero(data == _ITEM_END)
    # Every item: where it starts, its string (row) and where it ends, in position order within each kind.
    filled_rows = np.flatnonzero(offsets[1:] > offsets[:-1])  # an empty string holds no item
    after_end = items_end[items_end + 1 < len(data)] + 1  # a trailing \x02 starts no item
    starts = np.concatenate([offsets[filled_rows], after_end])
    rows = np.concatenate([filled_rows, np.searchsorted(offsets, after_end, side="right") - 1])
    after_next = np.append(items_end, len(data))[1 : len(after_end) + 1]  # an item after a \x02 ends at the next
    next_end = np.concatenate(
        [np.append(items_end, len(data))[np.searchsorted(items_end, starts[: len(filled_rows)])], after_next]
    )
    ends = np.minimum(next_end, offsets[rows + 1])
    padded = np.concatenate([data, np.zeros(_WORD, dtype=np.uint8)])  # a word can be read at any item start
    words = at_every_byte(padded, "<u8")[starts]
    spans = []
    for name in names:
        key = name.encode() + NAME_VALUE_SEPARATOR.encode()
        head = key[:_WORD]
        hit = (words & np.uint64((1 << (8 * len(head))) - 1)) == np.uint64(int.from_bytes(head, "little"))
        for i in range(_WORD, len(key)):  # a key longer than a word: its other bytes one at a time
            hit[hit] = padded[starts[hit] + i] == key[i]
        at = starts[hit]
        value_start, value_end, row = at + len(key), ends[hit], rows[hit]
        if len(at) > 1 and (np.diff(at) < 0).any():
            order = np.argsort(at, kind="stable")
            value_start, value_end, row = value_start[order], value_end[order], row[order]
        filled = value_end > value_start
        found_at = offsets[:-1].copy()  # absent: the string's start, so the spans stay in buffer order
        lengths = np.full(count, -1, dtype=np.int64)
        found_at[row[filled]] = value_start[filled]  # in position order: the last occurrence in a string wins
        lengths[row[filled]] = (value_end - value_start)[filled]
        spans.append((found_at, lengths))
    return spans
