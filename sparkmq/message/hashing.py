"""Java ``String.hashCode`` — the tagsCode of the ConsumeQueue and the IndexFile key hash.

``h = 31*h + c`` over UTF-16 code units with 32-bit wrap-around. ``java_string_hash``
is the plain reference; ``java_string_hashes`` computes many at once with numpy and
must return exactly the same values (tests run both). For UTF-8 bytes (property values
as stored): ``java_utf8_hash`` one at a time, ``java_hashes_of_slices`` for many slices
of one buffer at once, again with the same values.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache
from operator import mul

import numpy as np
import numpy.typing as npt

_MASK32 = 0xFFFFFFFF
_POWERS_CACHE: list[npt.NDArray[np.uint32]] = [np.ones(1, dtype=np.uint32)]
_DESCENDING_POWERS: list[int] = []  # 31**k mod 2**32 for k from its length - 1 down to 0 (grown on demand)


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


@lru_cache(maxsize=256)
def _unsigned_hash(text: str) -> int:
    return java_string_hash(text) & _MASK32


def java_utf8_hash(value: bytes, prefix: str = "") -> int:
    """``java_string_hash(prefix + value.decode("utf-8", errors="replace"))``, without the decode for ASCII.

    The plain per-value path (small batches, the reference of ``java_hashes_of_slices``).

    >>> java_utf8_hash(b"k1", "T#") == java_string_hash("T#k1")
    True
    """
    if not value.isascii():
        return java_string_hash(prefix + value.decode("utf-8", errors="replace"))
    n = len(value)  # ASCII: the UTF-16 code units are the bytes themselves, h = prefix·31^n + Σ c_i·31^(n-1-i)
    if len(_DESCENDING_POWERS) <= n:
        _DESCENDING_POWERS[:] = [pow(31, k, 1 << 32) for k in range(max(2 * n, 64), -1, -1)]
    top = len(_DESCENDING_POWERS) - 1  # the list ends with 31^0
    tail: int = sum(map(mul, value, _DESCENDING_POWERS[top + 1 - n :]))
    h = (_unsigned_hash(prefix) * _DESCENDING_POWERS[top - n] + tail) & _MASK32
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


def _power_table(base: int, n: int) -> npt.NDArray[np.uint32]:
    """``base**k mod 2**32`` for k in [0, n), by doubling (log2(n) numpy passes)."""
    table = np.ones(1, dtype=np.uint32)
    while len(table) < n:
        table = np.concatenate((table, table * np.uint32(pow(base, len(table), 1 << 32))))
    return table[:n]


_INVERSE_31 = pow(31, -1, 1 << 32)  # 31 is odd, so it has an inverse mod 2**32
_SLICE_TABLES: list[npt.NDArray[np.uint32]] = [np.ones(1, dtype=np.uint32), np.ones(1, dtype=np.uint32)]
_SLICE_TABLE_CACHE_MAX = 1 << 20  # entries (8 MiB for both); bigger buffers get tables of their own, not kept


def _slice_tables(n: int) -> tuple[npt.NDArray[np.uint32], npt.NDArray[np.uint32]]:
    """(31**k, 31**-k) mod 2**32 for k in [0, n)."""
    powers, inverses = _SLICE_TABLES
    if len(powers) < n:
        size = max(n, 2 * len(powers), 4096)
        powers, inverses = _power_table(31, size), _power_table(_INVERSE_31, size)
        if size <= _SLICE_TABLE_CACHE_MAX:
            _SLICE_TABLES[:] = [powers, inverses]
    return powers, inverses


def java_hashes_of_slices(
    data: npt.NDArray[np.uint8],
    starts: npt.NDArray[np.int64],
    lengths: npt.NDArray[np.int64],
    prefixes: Sequence[tuple[str, int]] = (),
) -> npt.NDArray[np.int32]:
    """``java_utf8_hash(bytes(data[s:s + n]), prefix)`` for every slice, vectorised.

    The slices are UTF-8 text inside one buffer (e.g. property values in a joined
    properties string); nothing is copied out per slice. ``prefixes`` lists runs of
    ``(prefix, count)``: the first ``count`` slices are hashed after the first prefix, the
    next run after the second, and so on; slices past the runs get no prefix.

    With ``A(p) = sum(data[q] * 31**-q for q < p)`` (one cumulative sum over the buffer,
    mod 2**32, where 31 is invertible), the hash of ``data[s:e]`` is
    ``31**(e-1) * (A(e) - A(s))`` and a prefix adds ``hash(prefix) * 31**(e-s)``. That
    holds for ASCII, whose UTF-16 code units are its bytes; a slice holding a byte >= 0x80
    is re-hashed on its own through ``java_utf8_hash`` (decode with replacement).

    >>> buf = np.frombuffer(b"xxTagAyyk1", dtype=np.uint8)
    >>> java_hashes_of_slices(buf, np.array([2, 8]), np.array([4, 2]), [("T#", 1)]).tolist() == [
    ...     java_string_hash("T#TagA"), java_string_hash("k1")]
    True
    """
    count = len(starts)
    if count == 0:
        return np.zeros(0, dtype=np.int32)
    starts = np.asarray(starts, dtype=np.int64)
    lengths = np.asarray(lengths, dtype=np.int64)
    ends = starts + lengths
    size = int(ends.max())  # only the buffer up to the last slice end matters
    powers, inverses = _slice_tables(size + 1)
    cumulative = np.zeros(size + 1, dtype=np.uint32)
    np.cumsum(data[:size] * inverses[:size], dtype=np.uint32, out=cumulative[1:])
    # An empty slice reads powers[-1] when it starts at 0, times a zero difference.
    sums = (cumulative[ends] - cumulative[starts]) * powers[ends - 1]
    names = [prefix for prefix, _ in prefixes]
    runs = [run for _, run in prefixes]
    if any(names):
        heads = np.array([_unsigned_hash(p) for p in names] + [0], dtype=np.uint32)
        per_slice = np.repeat(heads, [*runs, max(count - sum(runs), 0)])[:count]
        sums = sums + per_slice * powers[lengths]  # uint32 arithmetic wraps mod 2**32
    hashes: npt.NDArray[np.int32] = sums.astype(np.uint32).view(np.int32)
    if size and int(data[:size].max()) >= 0x80:
        high = np.zeros(size + 1, dtype=np.int64)
        np.cumsum(data[:size] >= 0x80, out=high[1:])
        boundaries = np.cumsum(runs).tolist()
        for row in np.flatnonzero(high[ends] != high[starts]).tolist():
            run = int(np.searchsorted(boundaries, row, side="right"))
            start = int(starts[row])
            hashes[row] = java_utf8_hash(
                data[start : start + int(lengths[row])].tobytes(), names[run] if run < len(names) else ""
            )
    return hashes
