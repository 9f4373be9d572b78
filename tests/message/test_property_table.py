"""PropertyTable (bulk property lookup) against find_property / decode_properties record by record."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkmq.message.properties import decode_properties, find_property
from sparkmq.message.property_table import PropertyTable

LOOKED_UP = [b"TAGS", b"KEYS", b"UNIQ_KEY", b"A_KEY_LONGER_THAN_SIXTEEN_BYTES"]
# Keys that tempt a sloppy search: suffixes, prefixes and near misses of the looked-up ones.
KEY_NAMES = [
    *LOOKED_UP,
    b"MYTAGS",
    b"TAGSX",
    b"AGS",
    b"TAG",
    b"KEY",
    b"UNIQ_KEYS",
    b"XUNIQ_KEY",
    b"T",
    b"K",
    b"A_KEY_LONGER_THAN_SIXTEEN_BYTE",
    b"",
]

value_bytes = st.one_of(
    st.just(b""),
    st.text(st.characters(exclude_characters="\x01\x02", exclude_categories=("Cs",)), max_size=12).map(str.encode),
    st.lists(st.sampled_from([b"a", b"b", b" ", b"  ", b"k1", b"\xc3\xa9", b"\xff", b"\x01"]), max_size=6).map(
        b"".join
    ),
)


@st.composite
def properties_strings(draw: st.DrawFn) -> bytes:
    """Encoded properties with repeated, missing and empty keys, stray items and separators."""
    items = []
    for _ in range(draw(st.integers(0, 7))):
        shape = draw(st.sampled_from(["item", "item", "item", "no_separator", "empty"]))
        if shape == "item":
            items.append(draw(st.sampled_from(KEY_NAMES)) + b"\x01" + draw(value_bytes))
        elif shape == "no_separator":
            items.append(draw(st.sampled_from(KEY_NAMES)))
    raw = b"\x02".join(items)
    return raw + b"\x02" if draw(st.booleans()) else raw  # C++ clients keep a trailing 0x02


batches = st.lists(properties_strings(), max_size=12)


def _slices(table: PropertyTable, found: tuple[object, object, object]) -> list[tuple[int, bytes]]:
    rows, starts, lengths = (a.tolist() for a in found)
    return [(r, table.joined[s : s + n]) for r, s, n in zip(rows, starts, lengths, strict=True)]


@settings(max_examples=400, deadline=None)
@given(batches)
def test_values_agree_with_find_property(properties: list[bytes]) -> None:
    table = PropertyTable(properties)
    for key in LOOKED_UP:
        assert table.column(key) == [find_property(raw, key) for raw in properties], key
    found = table.find(LOOKED_UP)
    for key, slices in zip(LOOKED_UP, found, strict=True):
        expected = [(row, v) for row, raw in enumerate(properties) if (v := find_property(raw, key)) is not None]
        assert _slices(table, slices) == expected, key


@settings(max_examples=300, deadline=None)
@given(batches)
def test_values_agree_with_decode_properties(properties: list[bytes]) -> None:
    table = PropertyTable(properties)
    for key in LOOKED_UP:
        expected = [decode_properties(raw).get(key.decode()) for raw in properties]
        got = [None if v is None else v.decode("utf-8", errors="replace") for v in table.column(key)]
        assert got == expected, key


@settings(max_examples=300, deadline=None)
@given(batches)
def test_tokens_are_the_space_separated_keys(properties: list[bytes]) -> None:
    table = PropertyTable(properties)
    expected = [
        (row, token)
        for row, raw in enumerate(properties)
        for token in (find_property(raw, b"KEYS") or b"").split(b" ")
        if token
    ]
    assert _slices(table, table.tokens(b"KEYS")) == expected


def test_the_last_non_empty_value_wins_per_record() -> None:
    # One record repeats TAGS, the next lacks it: as many matches as records, yet not one each.
    table = PropertyTable([b"TAGS\x01A\x02TAGS\x01B", b"KEYS\x01x"])
    assert table.column(b"TAGS") == [b"B", None]
    table = PropertyTable([b"TAGS\x01A\x02TAGS\x01", b"MYTAGS\x01m\x02KEYS\x01x", b"TAGS\x01\x02TAGS\x01C"])
    assert table.column(b"TAGS") == [b"A", None, b"C"]


@pytest.mark.parametrize("properties", [[], [b""], [b"", b""], [b"\x02\x02"]])
def test_nothing_to_find(properties: list[bytes]) -> None:
    table = PropertyTable(properties)
    assert [len(s.rows) for s in table.find(LOOKED_UP)] == [0] * len(LOOKED_UP)
    assert len(table.tokens(b"KEYS").rows) == 0
