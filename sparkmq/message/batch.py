"""The SEND_BATCH_MESSAGE body: items of ``size | magic 0 | crc 0 | flag | body | properties``.

One item per message (``MessageDecoder.encodeMessages``); the broker turns each item into
one stored record, with the batch's own properties appended to each item's.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from sparkmq import native
from sparkmq.errors import MessageError, PropertiesTooLargeError
from sparkmq.message.layout import MAX_PROPERTIES_BYTES

_ITEM_HEAD = struct.Struct(">iiiii")  # total size, magic, body crc, flag, body length
_INT16 = struct.Struct(">h")
ITEM_FIXED_BYTES = 22  # 20-byte head + int16 properties length
# native/batchitems.c: both directions in one call (~0.05 µs an item instead of ~0.5 to encode and ~1 to
# decode); it returns None for whatever it leaves to the Python below (which raises the precise error)
_native = native.batchitems
if _native is not None:
    _native.configure(MAX_PROPERTIES_BYTES)


@dataclass(frozen=True, slots=True)
class BatchItems:
    """The decoded items of a batch body, as columns."""

    bodies: list[bytes]
    properties: list[bytes]
    flags: list[int]

    def __len__(self) -> int:
        return len(self.bodies)


def encode_batch_items(
    bodies: Sequence[bytes], properties: Sequence[bytes], flags: Sequence[int] | None = None
) -> bytes:
    """Encode messages as a batch body.

    >>> len(encode_batch_items([b"hello"], [b"TAGS\\x01A"]))
    33
    """
    if _native is not None and (made := _native.encode(bodies, properties, flags)) is not None:
        return made  # type: ignore[no-any-return]
    parts: list[bytes] = []
    for i, body in enumerate(bodies):
        prop = properties[i]
        if len(prop) > MAX_PROPERTIES_BYTES:
            raise PropertiesTooLargeError(
                f"properties of message {i} are {len(prop)} bytes, over {MAX_PROPERTIES_BYTES}"
            )
        size = ITEM_FIXED_BYTES + len(body) + len(prop)
        parts.append(_ITEM_HEAD.pack(size, 0, 0, 0 if flags is None else int(flags[i]), len(body)))
        parts.append(body)
        parts.append(_INT16.pack(len(prop)))
        parts.append(prop)
    return b"".join(parts)


def decode_batch_items(data: bytes | memoryview) -> BatchItems:
    """Split a batch body into items; raise MessageError for a truncated or inconsistent item."""
    if _native is not None and (columns := _native.decode(data)) is not None:
        return BatchItems(*columns)
    view = memoryview(data)
    end = len(view)
    bodies: list[bytes] = []
    props: list[bytes] = []
    flags: list[int] = []
    pos = 0
    while pos < end:
        if end - pos < ITEM_FIXED_BYTES:
            raise MessageError(f"batch item at {pos}: {end - pos} bytes left, fewer than an item head")
        size, _magic, _crc, flag, body_len = _ITEM_HEAD.unpack_from(view, pos)
        if size < ITEM_FIXED_BYTES or size > end - pos or body_len < 0 or ITEM_FIXED_BYTES + body_len > size:
            raise MessageError(f"batch item at {pos}: size {size} or body length {body_len} does not fit")
        body_end = pos + 20 + body_len
        (prop_len,) = _INT16.unpack_from(view, body_end)
        if prop_len < 0 or ITEM_FIXED_BYTES + body_len + prop_len != size:
            raise MessageError(f"batch item at {pos}: size {size} does not match its body and properties")
        bodies.append(bytes(view[pos + 20 : body_end]))
        props.append(bytes(view[body_end + 2 : body_end + 2 + prop_len]))
        flags.append(flag)
        pos += size
    return BatchItems(bodies, props, flags)


MAX_INFLATED_BATCH_BYTES = 64 * 1024 * 1024  # a compressed SEND_BATCH body may not inflate past this
