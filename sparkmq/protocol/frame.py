"""Sans-I/O frame decoder: bytes in, :class:`RemotingCommand` objects out (h11-style).

The decoder never touches a socket. The remoting layer hands it whatever it read; it keeps the
unfinished tail in one ``bytearray`` with a read position (no re-slicing of the whole buffer),
decodes each complete frame from a ``memoryview`` (the body is copied once), and rejects a bad
length prefix as soon as its 4 bytes arrive, so it never holds more than one maximum frame
between calls. After a :class:`ProtocolError` the decoder stays failed: the connection must be
closed (a bad frame closes only its own connection).
"""

from __future__ import annotations

import struct
from typing import NoReturn

from sparkmq.errors import FrameTooLargeError, ProtocolError

from .codes import LENGTH_PREFIX_BYTES, MAX_FRAME_BYTES, MIN_FRAME_LENGTH
from .command import RemotingCommand, decode_payload

_LENGTH = struct.Struct(">I")


class FrameDecoder:
    """Turns a byte stream into remoting commands, whatever the chunking.

    Use :meth:`feed` for "all complete commands in this chunk", or :meth:`receive_data` plus
    :meth:`next_command` to act on every command that precedes a bad frame (as Netty does).

    Example::

        >>> frame = RemotingCommand(code=34, opaque=7).encode()
        >>> decoder = FrameDecoder()
        >>> decoder.feed(frame[:5]), decoder.buffered_bytes
        ([], 5)
        >>> [c.opaque for c in decoder.feed(frame[5:] + frame)]
        [7, 7]
    """

    __slots__ = ("_buffer", "_failure", "_max_frame_bytes", "_position")

    def __init__(self, *, max_frame_bytes: int = MAX_FRAME_BYTES) -> None:
        if max_frame_bytes < LENGTH_PREFIX_BYTES + MIN_FRAME_LENGTH:
            raise ValueError(f"max_frame_bytes {max_frame_bytes} cannot hold even an empty frame")
        self._buffer = bytearray()
        self._position = 0
        self._max_frame_bytes = max_frame_bytes
        self._failure: ProtocolError | None = None

    @property
    def buffered_bytes(self) -> int:
        """Bytes received but not yet decoded (an incomplete frame, between calls)."""
        return len(self._buffer) - self._position

    @property
    def failed(self) -> bool:
        """True once a :class:`ProtocolError` was raised; every later call raises again."""
        return self._failure is not None

    def receive_data(self, data: bytes | bytearray | memoryview) -> None:
        """Append bytes read from the peer; then call :meth:`next_command` until it gives None."""
        if self._failure is not None:
            self._raise_if_failed()
        if self._position:
            # O(1) in CPython: deleting a bytearray's head only moves its start pointer.
            del self._buffer[: self._position]
            self._position = 0
        self._buffer += data

    def next_command(self) -> RemotingCommand | None:
        """The next complete command, or None when more bytes are needed.

        Raises :class:`FrameTooLargeError` for a length prefix over the maximum and
        :class:`ProtocolError` for any other malformed frame.
        """
        if self._failure is not None:
            self._raise_if_failed()
        buffer, start = self._buffer, self._position
        if len(buffer) - start < LENGTH_PREFIX_BYTES:
            return None
        (length,) = _LENGTH.unpack_from(buffer, start)  # unsigned: 2**31 and up is "too large"
        if length < MIN_FRAME_LENGTH:
            self._fail(ProtocolError(f"frame length {length} is below the minimum {MIN_FRAME_LENGTH}"))
        if length > self._max_frame_bytes - LENGTH_PREFIX_BYTES:
            self._fail(
                FrameTooLargeError(
                    f"frame of {length + LENGTH_PREFIX_BYTES} bytes exceeds the maximum {self._max_frame_bytes}"
                )
            )
        end = start + LENGTH_PREFIX_BYTES + length
        if len(buffer) < end:
            return None
        with memoryview(buffer) as view:
            payload = view[start + LENGTH_PREFIX_BYTES : end]
            try:
                command = decode_payload(payload)
            except ProtocolError as exc:
                self._fail(exc)
            finally:
                payload.release()  # no export may outlive this call: the buffer must stay resizable
        if end == len(buffer):
            buffer.clear()
            self._position = 0
        else:
            self._position = end
        return command

    def front(self) -> tuple[bytearray, int]:
        """The buffer and the position of its first undecoded byte, for a native lane to look at:
        it must check every length it reads and keep no reference to the buffer; nothing is taken
        until :meth:`skip_to`, and what is left :meth:`next_command` decodes as usual. The buffer is
        the same object for the decoder's life (changed in place), empty when nothing is buffered.
        Raises as every call once the decoder failed."""
        if self._failure is not None:
            self._raise_if_failed()
        return self._buffer, self._position

    def skip_to(self, end: int) -> bool:
        """Take the whole frames before ``end`` (a position :meth:`front`'s looker returned, just after
        a frame; the current position: none) as served; True if it took any."""
        if self._failure is not None:
            self._raise_if_failed()
        buffer, start = self._buffer, self._position
        if end == start:
            return False
        if not start < end <= len(buffer):
            raise ValueError(f"a frame lane returned position {end} outside ({start}, {len(buffer)}]")
        if end == len(buffer):
            buffer.clear()
            self._position = 0
        else:
            self._position = end
        return True

    def feed(self, data: bytes | bytearray | memoryview) -> list[RemotingCommand]:
        """Add ``data`` and return every command it completes (possibly none).

        If a frame is malformed this raises, and commands decoded earlier in the same call are
        not returned; use :meth:`next_command` when those matter.
        """
        self.receive_data(data)
        commands: list[RemotingCommand] = []
        while (command := self.next_command()) is not None:
            commands.append(command)
        return commands

    def _fail(self, exc: ProtocolError) -> NoReturn:
        self._failure = exc
        raise exc

    def _raise_if_failed(self) -> None:
        # Callers test ``_failure`` first: these calls run once or more per read.
        if self._failure is not None:
            raise ProtocolError(f"the stream already failed: {self._failure.remark}") from self._failure


def decode_frame(frame: bytes | bytearray | memoryview) -> RemotingCommand:
    """Decode exactly one whole frame (length prefix included), e.g. from a capture.

    >>> decode_frame(RemotingCommand(code=105, opaque=1).encode()).code
    105
    """
    decoder = FrameDecoder()
    decoder.receive_data(frame)
    command = decoder.next_command()
    if command is None or decoder.buffered_bytes:
        raise ProtocolError(f"expected exactly one frame, got {len(frame)} bytes that are not one frame")
    return command


__all__ = ["FrameDecoder", "decode_frame"]
