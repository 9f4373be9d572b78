"""The source's Arrow columns, lean and wide, against the reference record decoder (no Spark, no broker).

The lean path finds TAGS, KEYS and UNIQ_KEY without building the properties map; it must give
the same values as the wide path and as ``decode_record`` + ``decode_properties`` on awkward
properties: repeated keys (the last wins), empty values, absent keys, bodies holding the
separator bytes 1 and 2.
"""

from __future__ import annotations

import zlib

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkmq.connector import arrow as arrow_module
from sparkmq.connector.arrow import _slices, _view_slices, records_to_arrow
from sparkmq.connector.columns import LEAN_COLUMNS, WIDE_COLUMNS, source_columns
from sparkmq.errors import CorruptRecordError
from sparkmq.message import Host, MessageBatch, encode_records, iter_records
from sparkmq.message.layout import COMPRESSED_FLAG

PROPERTIES = [
    b"TAGS\x01a\x02KEYS\x01k1 k2\x02UNIQ_KEY\x01U1\x02",
    b"TAGS\x01a\x02TAGS\x01b\x02WAIT\x01true\x02",  # a batch's properties appended to the item's own
    b"TAGS\x01\x02KEYS\x01k\x02",  # an empty value counts as absent
    b"",
    b"XTAGS\x01no\x02TAGSX\x01no\x02UNIQ_KEY\x01U5\x02",
    b"UNIQ_KEY\x01U6\x02KEYS\x01x\x02UNIQ_KEY\x01U7",  # no trailing separator
]


@pytest.fixture(scope="module")
def stored() -> bytes:
    bodies = [bytes([1, 2, 1, 2]) + b"TAGS\x01body\x02" * i for i in range(len(PROPERTIES))]
    batch = MessageBatch("ArrowT", 3, bodies, PROPERTIES, born_timestamp=1_700_000_000_000)
    return encode_records(batch, 0, len(bodies), 10, 4096, 1_700_000_000_123, Host(b"\x7f\x00\x00\x01", 10911))


def test_lean_columns_equal_the_wide_ones_and_the_reference_decoder(stored: bytes) -> None:
    lean = records_to_arrow(stored, "broker-a", columns=LEAN_COLUMNS)
    wide = records_to_arrow(stored, "broker-a", columns=WIDE_COLUMNS)
    assert lean.schema.names == list(LEAN_COLUMNS)
    for name in LEAN_COLUMNS:
        assert lean.column(name).equals(wide.column(name)), name
    reference = list(iter_records(stored))
    assert lean.column("tags").to_pylist() == [m.properties.get("TAGS") or None for m in reference]
    assert lean.column("keys").to_pylist() == [m.properties.get("KEYS") or None for m in reference]
    assert lean.column("tags").to_pylist() == ["a", "b", None, None, None, None]
    assert lean.column("msgId").to_pylist()[-2:] == ["U5", "U7"]


def test_include_properties_adds_the_map_after_body() -> None:
    assert source_columns(include_properties=True) == LEAN_COLUMNS[:8] + ("properties",) + LEAN_COLUMNS[8:]
    assert source_columns(wide=True) == WIDE_COLUMNS


def test_a_known_topic_gives_the_same_column(stored: bytes) -> None:
    assert records_to_arrow(stored, "broker-a", topic="ArrowT").equals(records_to_arrow(stored, "broker-a"))


@pytest.mark.parametrize("order", ["buffer", "shuffled"])
def test_slices_in_buffer_order_or_not_give_the_same_strings(order: str) -> None:
    """``_slices``' two paths: a take over alternating offsets (slices in buffer order) and binary views
    (any order), with short (inline) and long strings, empty ones and nulls."""
    raw = np.frombuffer(bytes(range(256)) * 4, dtype=np.uint8)
    starts = np.array([0, 3, 3, 20, 40, 100, 1000, 1020], dtype=np.int64)
    lengths = np.array([3, 0, 12, 13, 50, 0, 4, 4], dtype=np.int64)
    valid = np.array([True, True, True, True, True, False, True, True])
    if order == "shuffled":
        pick = np.array([7, 2, 0, 5, 1, 6, 4, 3])
        starts, lengths, valid = starts[pick], lengths[pick], valid[pick]
    expected = [bytes(raw[s : s + n]) if ok else None for s, n, ok in zip(starts, lengths, valid, strict=True)]
    for path in (_slices, _view_slices):
        got = path(raw, starts, lengths, pa.binary(), valid)
        assert got.to_pylist() == expected and got.type == pa.binary(), path.__name__


# -- the C path (sparkmq/connector/leanrecords.c) against the numpy reference ---------------------
needs_native = pytest.mark.skipif(arrow_module._leanrecords is None, reason="the C extension is not built")


LEAN_PROPERTIES = source_columns(include_properties=True)


def lean_both(buffer: bytes, columns: tuple[str, ...] = LEAN_COLUMNS) -> tuple[pa.RecordBatch, pa.RecordBatch]:
    native = records_to_arrow(buffer, "broker-a", columns=columns, topic="ArrowT")
    reference = records_to_arrow(buffer, "broker-a", columns=columns, topic="ArrowT", native=False)
    native.validate(full=True)
    reference.validate(full=True)
    return native, reference


@needs_native
@pytest.mark.parametrize("columns", [LEAN_COLUMNS, LEAN_PROPERTIES])
def test_native_lean_columns_equal_the_numpy_path(stored: bytes, columns: tuple[str, ...]) -> None:
    """Awkward properties (repeats, empty values, no UNIQ_KEY: the offset msgId), separators in bodies."""
    assert arrow_module._leanrecords.decode(stored, "properties" in columns) is not None  # the C path really ran
    native, reference = lean_both(stored, columns)
    assert native.equals(reference)
    assert native.schema == reference.schema


@needs_native
@settings(max_examples=150, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.sampled_from([b"TAGS", b"KEYS", b"UNIQ_KEY", b"WAIT", b"", b"\xc3\xa9t\xc3\xa9", b"a\x01b"]),
                st.one_of(st.text(max_size=40).map(str.encode), st.binary(max_size=40)),
                st.booleans(),  # False: an item without its name/value separator
            ),
            max_size=8,
        ),
        min_size=1,
        max_size=12,
    )
)
def test_native_properties_map_equals_the_numpy_path(items: list[list[tuple[bytes, bytes, bool]]]) -> None:
    """Any property bytes (repeated, empty or separator-holding names, empty values, items without a
    name/value separator, invalid UTF-8): the C map either declines (None: invalid UTF-8, which the numpy
    path replaces with U+FFFD) or equals the numpy reference's; valid UTF-8 always stays on the C path."""
    properties = [
        b"\x02".join(
            (name + b"\x01" + value if split else name + value).replace(b"\x02", b"") for name, value, split in row
        )
        for row in items
    ]
    batch = MessageBatch("ArrowT", 1, [b"x"] * len(properties), properties, born_timestamp=1_700_000_000_000)
    stored = encode_records(batch, 0, len(properties), 7, 1 << 33, 1_700_000_000_456, Host(b"\x0a\x00\x00\x02", 9876))
    decoded = arrow_module._leanrecords.decode(stored, True)
    utf8 = all(_is_utf8(p) for p in properties)
    assert decoded is not None or not utf8
    native, reference = lean_both(stored, LEAN_PROPERTIES)
    assert native.equals(reference)


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


@needs_native
@settings(max_examples=120, deadline=None)
@given(
    st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["TAGS", "KEYS", "UNIQ_KEY", "KEY", "TAGSX", "X"]),
                # properties are UTF-8; values on both sides of the C path's 32-byte short copy
                st.text(max_size=40).map(lambda t: t.replace("\x02", "").encode()),
            ),
            max_size=6,
        ),
        min_size=1,
        max_size=12,
    ),
    st.lists(st.binary(max_size=40), min_size=12, max_size=12),
)
def test_native_lean_columns_equal_the_numpy_path_for_any_properties(
    items: list[list[tuple[str, bytes]]], bodies: list[bytes]
) -> None:
    properties = [b"\x02".join(name.encode() + b"\x01" + value for name, value in row) for row in items]
    batch = MessageBatch("ArrowT", 1, bodies[: len(properties)], properties, born_timestamp=1_700_000_000_000)
    stored = encode_records(batch, 0, len(properties), 7, 1 << 33, 1_700_000_000_456, Host(b"\x0a\x00\x00\x02", 9876))
    native, reference = lean_both(stored)
    assert native.equals(reference)


@needs_native
def test_native_path_declines_compressed_bodies_and_corrupt_buffers(stored: bytes) -> None:
    compressed = MessageBatch("ArrowT", 3, [zlib.compress(b"hello")], [b"TAGS\x01a"], sys_flag=COMPRESSED_FLAG)
    buffer = encode_records(compressed, 0, 1, 0, 0, 1_700_000_000_123, Host(b"\x7f\x00\x00\x01", 10911))
    assert arrow_module._leanrecords.decode(buffer) is None
    native, reference = lean_both(buffer)
    assert native.equals(reference) and native.column("body").to_pylist() == [b"hello"]
    for bad in (stored[:-1], stored[:50], b"\x00" * 200):
        assert arrow_module._leanrecords.decode(bad) is None
        with pytest.raises(CorruptRecordError):
            records_to_arrow(bad, "broker-a", columns=LEAN_COLUMNS, topic="ArrowT")


@needs_native
@settings(max_examples=200, deadline=None)
@given(st.data())
def test_native_path_on_damaged_buffers_declines_or_agrees(stored: bytes, data: st.DataObject) -> None:
    """Bytes overwritten anywhere (sizes, lengths, separators) and the tail cut at any point: the C
    decode either declines (None) or gives exactly the numpy reference's columns; it never reads what
    the buffer does not hold as if it did (a length past the end, a property running off the buffer)."""
    damaged = bytearray(stored)
    for _ in range(data.draw(st.integers(1, 4))):
        damaged[data.draw(st.integers(0, len(damaged) - 1))] = data.draw(st.sampled_from([0, 1, 2, 0x7F, 0xFF]))
    cut = bytes(damaged[: data.draw(st.one_of(st.just(len(damaged)), st.integers(1, len(damaged))))])
    for columns in (LEAN_COLUMNS, LEAN_PROPERTIES):
        if arrow_module._leanrecords.decode(cut, "properties" in columns) is not None:
            native, reference = lean_both(cut, columns)
            assert native.equals(reference)


def test_property_bytes_that_are_not_utf8_become_replacement_characters() -> None:
    """A sender can store any bytes as properties; the string columns stay valid UTF-8, bad bytes
    read as U+FFFD (as Java's decoder and decode_properties read them), good non-ASCII text unchanged."""
    properties = [
        b"KEYS\x01k\xff\x02TAGS\x01" + "标签".encode() + b"\x02",
        b"X\xfe\x01v\x02UNIQ_KEY\x01U\xc0\x80",  # a bad name byte; an overlong NUL
        ("TAGS\x01标签\x02KEYS\x01ключ").encode(),
    ]
    batch = MessageBatch("ArrowT", 3, [b"a", b"b", b"c"], properties, born_timestamp=1_700_000_000_000)
    stored = encode_records(batch, 0, 3, 10, 4096, 1_700_000_000_123, Host(b"\x7f\x00\x00\x01", 10911))
    if arrow_module._leanrecords is not None:
        assert arrow_module._leanrecords.decode(stored) is None  # the C path leaves these to the numpy path
        assert (
            arrow_module._leanrecords.decode(
                encode_records(
                    MessageBatch("ArrowT", 3, [b"c"], properties[2:]), 0, 1, 10, 4096, 1, Host(b"\x7f\x00\x00\x01", 1)
                )
            )
            is not None
        )  # valid non-ASCII text stays on the C path
    lean = records_to_arrow(stored, "broker-a", columns=LEAN_COLUMNS, topic="ArrowT")
    wide = records_to_arrow(stored, "broker-a", columns=WIDE_COLUMNS)
    for columns in (lean, wide):
        columns.validate(full=True)
        assert columns.column("keys").to_pylist() == ["k\ufffd", None, "ключ"]
        assert columns.column("tags").to_pylist() == ["标签", None, "标签"]
        assert columns.column("msgId").to_pylist()[1] == "U\ufffd\ufffd"
    assert dict(wide.column("properties").to_pylist()[1]) == {"X\ufffd": "v", "UNIQ_KEY": "U\ufffd\ufffd"}
