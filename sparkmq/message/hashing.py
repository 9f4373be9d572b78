"""Java ``String.hashCode`` — the tagsCode of the ConsumeQueue and the IndexFile key hash.

``h = 31*h + c`` over UTF-16 code units with 32-bit wrap-around. ``java_string_hash``
is the plain reference; ``java_string_hashes`` computes many at once with numpy and
must return exactly the same values (tests run both).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

_MASK32 = 0xFFFFFFFF
_POWERS_CACHE: list[npt.NDArray[np.uint32]] = [np.ones(1, dtype=np.uint32)]


def java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` as a signed 32-bit int.

    >>> java_string_hash("TagA")
    2598919
    """
    h = 0
    units = text.encode("utf-16-be")
    for i in range(0, len(units), 2):
        h = (31 * h + (units[i] << 8 | units[i + 1])) & _MASK32
    return h - (1 << 32) if h & 0x80000000 else h


def _powers_of_31(n: int) -> npt.NDArray[np.uint32]:
    """31**k mod 2**32 for k in [0, n), cached and grown on demand."""
    cached = _POWERS_CACHE[0]
    if len(cached) < n:
        size = max(n, 2 * len(cached))
        powers = np.empty(size, dtype=np.uint32)
        value = 1
        for k in range(size):
            powers[k] = value
            value = (value * 31) & _MASK32
        _POWERS_CACHE[0] = cached = powers
    return cached


def java_string_hashes(texts: Sequence[str]) -> npt.NDArray[np.int32]:
    """``java_string_hash`` of every text, vectorised: one UTF-16 encode, one reduceat.

    >>> java_string_hashes(["TagA", ""]).tolist()
    [2598919, 0]
    """
    count = len(texts)
    if count == 0:
        return np.zeros(0, dtype=np.int32)
    joined = "".join(texts).encode("utf-16-be")
    units = np.frombuffer(joined, dtype=">u2").astype(np.uint32)
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=count)
    if int(lengths.sum()) != len(units):  # astral characters take two UTF-16 units
        lengths = np.fromiter((len(t.encode("utf-16-be")) // 2 for t in texts), dtype=np.int64, count=count)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    if len(units) == 0:
        return np.zeros(count, dtype=np.int32)
    # Each unit is weighted by 31**(units after it within its own string).
    key_of_unit = np.repeat(np.arange(count), lengths)
    exponents = ends[key_of_unit] - 1 - np.arange(len(units))
    weighted = units * _powers_of_31(int(lengths.max()))[exponents]  # wraps mod 2**32
    nonempty = lengths > 0
    sums = np.zeros(count, dtype=np.uint32)
    sums[nonempty] = np.add.reduceat(weighted, starts[nonempty], dtype=np.uint32)
    return sums.view(np.int32)


def java_prefixed_hashes(prefix: str, values: Sequence[bytes]) -> npt.NDArray[np.int32]:
    """``java_string_hash(prefix + v.decode())`` for each UTF-8 ``v``, vectorised over bytes.

    For ASCII values the UTF-16 code units are the bytes themselves, so the hash of
    ``prefix + v`` is ``hash(prefix) * 31**len(v) + hash(v)`` (mod 2**32) with no decoding.
    Anything non-ASCII takes the ``java_string_hashes`` path.

    >>> java_prefixed_hashes("T#", [b"k1"]).tolist() == [java_string_hash("T#k1")]
    True
    """
    count = len(values)
    if count == 0:
        return np.zeros(0, dtype=np.int32)
    joined = b"".join(values)
    data = np.frombuffer(joined, dtype=np.uint8)
    if data.size and int(data.max()) >= 0x80:
        return java_string_hashes([prefix + v.decode("utf-8", errors="replace") for v in values])
    lengths = np.fromiter(map(len, values), dtype=np.int64, count=count)
    ends = np.cumsum(lengths)
    powers = _powers_of_31(int(lengths.max()) + 1)
    sums = np.zeros(count, dtype=np.uint32)
    if data.size:
        key_of_unit = np.repeat(np.arange(count), lengths)
        weighted = data.astype(np.uint32) * powers[ends[key_of_unit] - 1 - np.arange(data.size)]
        nonempty = lengths > 0
        sums[nonempty] = np.add.reduceat(weighted, (ends - lengths)[nonempty], dtype=np.uint32)
    prefix_hash = np.uint32(java_string_hash(prefix) & _MASK32)
    return (prefix_hash * powers[lengths] + sums).astype(np.uint32).view(np.int32)
