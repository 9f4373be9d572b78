"""The client's connection: responses to :meth:`~RemotingConnection.request_lean` skip the command object.

A producer's send gets one small answer per request: a JSON header with ``code``, ``opaque``,
``flag``, maybe ``remark``, and ``extFields`` (no body). :class:`ClientConnection` reads such
frames with the one typed msgspec decode of :mod:`sparkmq.protocol.plain_header` (the decode the
reference path tries first) and completes the waiting future with that ``LeanResponse``
(``PlainHeader``): no ``RemotingCommand``, no frame-decoder bookkeeping per frame.

Only the plain case takes this path: a whole, bodiless JSON frame at the start of a read (or
after the previous read's lean frames) of the plain shape, a response, awaited through
``request_lean``.
From the first frame that is anything else (a request from the broker, a body, a ROCKETMQ
binary header, a bad length, a header of another shape) the rest of the read goes to the
reference :class:`~sparkmq.protocol.FrameDecoder` path of :class:`RemotingConnection`, which
decodes or rejects it exactly as before (a ``request_lean`` waiter then gets the command).
"""

from __future__ import annotations

import struct

from sparkmq.protocol import RESPONSE_FLAG
from sparkmq.protocol.codes import HEADER_LENGTH_FIELD_BYTES, MIN_FRAME_LENGTH
from sparkmq.remoting.connection import RemotingConnection

try:
    from sparkmq.protocol.plain_header import PLAIN_HEADER_ERRORS, decode_plain_header
    from sparkmq.protocol.plain_header import PlainHeader as LeanResponse
except ImportError:  # msgspec is missing: every response takes the reference path
    decode_plain_header = None  # type: ignore[assignment]
    LeanResponse = None  # type: ignore[assignment,misc]

__all__ = ["ClientConnection", "LeanResponse"]

# length prefix, then serializeType << 24 | header length: a JSON header (type 0) reads as its length
_PREFIX = struct.Struct(">II")
_PREFIX_BYTES = _PREFIX.size
MAX_TAIL_BYTES = 64 * 1024  # an unfinished lean frame is kept aside up to this size; longer ones are not lean
_LENGTH = struct.Struct(">I")
_LENGTH_BYTES = _LENGTH.size
_LEAN_LENGTHS = (MIN_FRAME_LENGTH, MAX_TAIL_BYTES)  # a length prefix outside goes to the reference decoder


class ClientConnection(RemotingConnection):
    """A :class:`RemotingConnection` whose lean responses are read without a ``RemotingCommand``."""

    _tail = b""  # the start of a lean frame the last read ended in

    def data_received(self, data: bytes) -> None:
        lean = self._lean
        if not lean or self._closing_when_served or self._decoder.buffered_bytes or decode_plain_header is None:
            if self._tail:
                data, self._tail = self._tail + data, b""
            super().data_received(data)
            return
        if self._tail:
            data, self._tail = self._tail + data, b""
        position, size = 0, len(data)
        while True:
            if size - position < _PREFIX_BYTES:
                if (
                    size - position >= _LENGTH_BYTES
                    and not _LEAN_LENGTHS[0] <= _LENGTH.unpack_from(data, position)[0] <= _LEAN_LENGTHS[1]
                ):
                    break  # a bad length prefix is rejected as soon as it arrives, by the reference path
                if position < size:
                    self._tail = data[position:]
                return
            length, header_length = _PREFIX.unpack_from(data, position)
            end = position + _PREFIX_BYTES + header_length
            if length != HEADER_LENGTH_FIELD_BYTES + header_length:
                break  # a body, a binary header or a bad length: the reference path's
            if end > size:
                if end - position <= MAX_TAIL_BYTES:
                    self._tail = data[position:]
                    return
                break
            try:
                response = decode_plain_header(data[position + _PREFIX_BYTES : end])
            except PLAIN_HEADER_ERRORS:
                break
            if not response.flag & RESPONSE_FLAG:
                break
            future = lean.pop(response.opaque, None)
            if future is None:
                break  # not awaited through request_lean (or already timed out): the reference path's
            if not future.done():
                future.set_result(response)
            position = end
        super().data_received(data[position:] if position else data)
