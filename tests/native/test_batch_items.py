"""native/batchitems.c against message/batch.py's Python: the same SEND_BATCH_MESSAGE bytes and columns.

The C module returns None for what it leaves to Python; the public functions then raise the reference's
precise error, so a malformed body or an oversized property is refused the same way with or without it.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkmq.errors import MessageError, PropertiesTooLargeError
from sparkmq.message import batch
from sparkmq.message.layout import MAX_PROPERTIES_BYTES

native = pytest.importorskip("sparkmq.native._batchitems")

_ITEMS = st.lists(
    st.tuples(st.binary(max_size=300), st.binary(max_size=200), st.integers(-(2**31), 2**31 - 1)), max_size=40
)


def python_encode(bodies: list[bytes], props: list[bytes], flags: list[int] | None) -> bytes:
    saved, batch._native = batch._native, None
    try:
        return batch.encode_batch_items(bodies, props, flags)
    finally:
        batch._native = saved


def python_decode(data: bytes) -> batch.BatchItems:
    saved, batch._native = batch._native, None
    try:
        return batch.decode_batch_items(data)
    finally:
        batch._native = saved


@settings(max_examples=300)
@given(_ITEMS, st.booleans())
def test_encode_and_decode_match_the_python(items: list[tuple[bytes, bytes, int]], with_flags: bool) -> None:
    bodies, props = [b for b, _p, _f in items], [p for _b, p, _f in items]
    flags = [f for _b, _p, f in items] if with_flags else None
    data = native.encode(bodies, props, flags)
    assert data == python_encode(bodies, props, flags)
    assert native.encode(tuple(bodies), tuple(props), None if flags is None else tuple(flags)) == data
    decoded = native.decode(data)
    assert decoded is not None
    assert batch.BatchItems(*decoded) == python_decode(data)
    assert decoded == (bodies, props, flags or [0] * len(bodies))
    assert native.decode(memoryview(data)) == decoded


@settings(max_examples=300)
@given(_ITEMS.filter(bool), st.data())
def test_a_damaged_body_is_refused_as_the_python_refuses_it(items: list[tuple[bytes, bytes, int]], data) -> None:  # type: ignore[no-untyped-def]
    body = bytearray(python_encode([b for b, _p, _f in items], [p for _b, p, _f in items], None))
    if data.draw(st.booleans()):
        del body[data.draw(st.integers(0, len(body) - 1)) :]  # truncated
    else:
        at = data.draw(st.integers(0, len(body) - 1))
        body[at] ^= data.draw(st.integers(1, 255))  # one byte changed
    damaged = bytes(body)
    try:
        expected = python_decode(damaged)
    except MessageError as exc:
        assert native.decode(damaged) is None  # the public function raises the reference's error
        with pytest.raises(MessageError, match=str(exc).split(":")[0]):
            batch.decode_batch_items(damaged)
    else:
        made = native.decode(damaged)
        assert made is not None and batch.BatchItems(*made) == expected


def test_what_the_c_leaves_to_python_raises_as_before() -> None:
    too_long = b"k" * (MAX_PROPERTIES_BYTES + 1)
    assert native.encode([b"x"], [too_long], None) is None
    with pytest.raises(PropertiesTooLargeError, match="message 0"):
        batch.encode_batch_items([b"x"], [too_long])
    assert native.encode([b"x"], [b""], [2**31]) is None  # the flag does not fit an int32
    with pytest.raises(struct.error):
        batch.encode_batch_items([b"x"], [b""], [2**31])
    assert native.encode([bytearray(b"x")], [b""], None) is None  # not bytes: the Python joins it
    assert batch.encode_batch_items([bytearray(b"x")], [b""]) == python_encode([b"x"], [b""], None)
    assert native.decode(b"") == ([], [], [])
    with pytest.raises(MessageError, match="fewer than an item head"):
        batch.decode_batch_items(b"\x00" * 21)
