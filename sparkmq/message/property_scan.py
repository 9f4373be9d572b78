"""Find a few properties' values in many properties strings at once, with numpy, no per-record Python.

The strings lie back to back in one buffer (``data[offsets[i]:offsets[i+1]]`` is record ``i``'s
``name\\x01value\\x02name\\x01value...``). Per name, a byte compare over the buffer finds where
``name\\x01`` occurs, kept where it starts an item (a string's start or the byte after a
``\\x02``); the value runs from there to the next ``\\x02`` or the string's end. The plain reference
is ``properties.decode_properties`` per record; tests check both agree, the last occurrence of a
name winning and an empty value counting as absent, as there.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from sparkmq.message.properties import NAME_VALUE_SEPARATOR, PROPERTY_SEPARATOR

_NAME_END = ord(NAME_VALUE_SEPARATOR)
_ITEM_END = ord(PROPERTY_SEPARATOR)
Span = tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]


def find_values(data: npt.NDArray[np.uint8], offsets: npt.NDArray[np.int64], names: tuple[str, ...]) -> list[Span]:
    """Per name, (start in ``data``, length) of its value in each of the ``len(offsets) - 1`` strings;
    length -1 where the string has no such property or its value is empty.

    >>> data = np.frombuffer(b"TAGS\\x01a\\x02KEYS\\x01k1 k2" b"KEYS\\x01x", dtype=np.uint8)
    >>> (tags_at, tags_len), (keys_at, keys_len) = find_values(data, np.array([0, 17, 23]), ("TAGS", "KEYS"))
    >>> tags_len.tolist(), keys_at.tolist(), keys_len.tolist()
    ([1, -1], [12, 22], [5, 1])
    """
    count = len(offsets) - 1
    items_end = np.flatnonzero(data == _ITEM_END)
    item_start = np.zeros(len(data) + 1, dtype=bool)
    item_start[items_end + 1] = True
    item_start[offsets] = True
    spans = []
    for name in names:
        key = np.frombuffer(name.encode() + NAME_VALUE_SEPARATOR.encode(), dtype=np.uint8)
        at = np.flatnonzero(data[: max(len(data) - len(key), 0)] == key[0])  # a value needs a byte after the key
        for i in range(1, len(key)):
            at = at[data[at + i] == key[i]]
        at = at[item_start[at]]  # the key starts an item
        row = np.searchsorted(offsets, at, side="right") - 1
        value_start = at + len(key)
        following = np.searchsorted(items_end, value_start)
        next_end = items_end[np.minimum(following, len(items_end) - 1)] if len(items_end) else np.zeros_like(at)
        value_end = np.minimum(offsets[row + 1], np.where(following < len(items_end), next_end, len(data)))
        filled = value_end > value_start
        starts = np.zeros(count, dtype=np.int64)
        lengths = np.full(count, -1, dtype=np.int64)
        starts[row[filled]] = value_start[filled]  # ascending: the last occurrence in a string wins
        lengths[row[filled]] = (value_end - value_start)[filled]
        spans.append((starts, lengths))
    return spans
