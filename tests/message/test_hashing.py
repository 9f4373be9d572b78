"""Java ``String.hashCode``: hand-computed values and the vectorised path against the plain one."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkmq.message import java_string_hash, java_string_hashes
from sparkmq.message.hashing import java_hashes_of_slices, java_utf8_hash


def _by_definition(text: str) -> int:
    """s[0]*31^(n-1) + ... + s[n-1] over UTF-16 code units, as a signed 32-bit int."""
    units = []
    for ch in text:
        cp = ord(ch)
        if cp >= 0x10000:  # a surrogate pair
            cp -= 0x10000
            units += [0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)]
        else:
            units.append(cp)
    n = len(units)
    total = sum(u * 31 ** (n - 1 - i) for i, u in enumerate(units)) % 2**32
    return total - 2**32 if total >= 2**31 else total


KNOWN = [
    ("", 0),
    ("a", 97),
    ("ab", 97 * 31 + 98),
    ("Aa", 2112),
    ("BB", 2112),  # the classic collision
    ("TagA", 84 * 31**3 + 97 * 31**2 + 103 * 31 + 65),  # 2598919
    ("hello", 99162322),
    ("polygenelubricants", -(2**31)),  # famous: hashes to Integer.MIN_VALUE
    ("\U0001f600", 0xD83D * 31 + 0xDE00),  # 😀 = surrogates D83D DE00 -> 1772899, not 0x1F600
    ("a\U0001f600b", (97 * 31**3 + 0xD83D * 31**2 + 0xDE00 * 31 + 98) % 2**32),
    ("\uffff" * 3, 0xFFFF * (31**2 + 31 + 1)),  # 65076255: code units are unsigned 16-bit
    ("TopicTest", -1902610879),  # overflows to a negative int
]


@pytest.mark.parametrize(("text", "expected"), KNOWN, ids=[repr(t) for t, _ in KNOWN])
def test_known_values(text: str, expected: int) -> None:
    assert _by_definition(text) == expected
    assert java_string_hash(text) == expected
    assert java_string_hashes([text]).tolist() == [expected]


def test_known_literals() -> None:
    assert java_string_hash("TagA") == 2598919
    assert java_string_hash("\U0001f600") == 1772899
    assert java_string_hash("TopicTest") == -1902610879
    assert java_string_hash("x" * 40) == 847293440


def test_hashes_dtype_and_empty() -> None:
    out = java_string_hashes(["", "a", "", "TagA", ""])
    assert out.dtype == np.int32
    assert out.tolist() == [0, 97, 0, 2598919, 0]
    assert java_string_hashes([]).tolist() == []
    assert java_string_hashes(["", ""]).tolist() == [0, 0]


def test_long_strings_grow_the_power_table() -> None:
    texts = ["q" * 5000, "\U0001f600" * 3000, "z"]
    assert java_string_hashes(texts).tolist() == [_by_definition(t) for t in texts]


any_text = st.text(
    st.one_of(st.characters(exclude_categories=("Cs",)), st.characters(min_codepoint=0x10000)), max_size=40
)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.just(""), any_text), max_size=30))
def test_vectorised_equals_plain(texts: list[str]) -> None:
    expected = [java_string_hash(s) for s in texts]
    assert java_string_hashes(texts).tolist() == expected
    assert expected == [_by_definition(s) for s in texts]


# UTF-8 bytes as they arrive: ASCII, any text (multi-byte, astral), and invalid sequences.
utf8_ish = st.one_of(
    st.binary(max_size=24).map(lambda b: bytes(c & 0x7F for c in b)),
    st.text(max_size=10).map(str.encode),
    st.binary(max_size=12),
)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.just(""), any_text), utf8_ish)
def test_utf8_hash_equals_hash_of_the_decoded_concatenation(prefix: str, value: bytes) -> None:
    assert java_utf8_hash(value, prefix) == java_string_hash(prefix + value.decode("utf-8", errors="replace"))


@st.composite
def sliced_buffers(draw: st.DrawFn) -> tuple[bytes, list[tuple[int, int]], list[tuple[str, int]]]:
    """A buffer of concatenated values with filler between them, the value slices, prefix runs."""
    values = draw(st.lists(utf8_ish, max_size=20))
    buffer, slices = b"", []
    for value in values:
        buffer += draw(utf8_ish)  # filler the slices must not see
        slices.append((len(buffer), len(value)))
        buffer += value
    if slices and draw(st.booleans()):
        slices.append((0, 0))  # an empty slice at position 0
    runs = draw(st.lists(st.tuples(st.one_of(st.just(""), any_text), st.integers(0, 8)), max_size=3))
    return buffer, draw(st.permutations(slices)), runs


@settings(max_examples=300, deadline=None)
@given(sliced_buffers())
def test_slice_hashes_equal_the_plain_hash_of_each_slice(
    case: tuple[bytes, list[tuple[int, int]], list[tuple[str, int]]],
) -> None:
    buffer, slices, runs = case
    expected = []
    prefixes = [p for p, n in runs for _ in range(n)]
    for row, (start, length) in enumerate(slices):
        prefix = prefixes[row] if row < len(prefixes) else ""
        expected.append(java_utf8_hash(buffer[start : start + length], prefix))
    data = np.frombuffer(buffer, dtype=np.uint8)
    starts = np.array([s for s, _ in slices], dtype=np.int64)
    lengths = np.array([n for _, n in slices], dtype=np.int64)
    got = java_hashes_of_slices(data, starts, lengths, runs)
    assert got.dtype == np.int32
    assert got.tolist() == expected


def test_slice_hashes_of_long_buffers_grow_the_tables() -> None:
    values = [bytes([65 + i % 26]) * (1000 + i) for i in range(300)]  # ~450 KB
    data = np.frombuffer(b"".join(values), dtype=np.uint8)
    lengths = np.array([len(v) for v in values], dtype=np.int64)
    got = java_hashes_of_slices(data, np.cumsum(lengths) - lengths, lengths, [("Topic#", 300)])
    assert got.tolist() == [java_string_hash("Topic#" + v.decode()) for v in values]
