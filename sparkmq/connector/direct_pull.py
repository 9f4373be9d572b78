"""PULL_MESSAGE on a Spark task's own blocking socket: no event-loop hand-off, one copy of each answer.

A read task is one thread that pulls, decodes and hands batches to Spark in turn. Through the
client it paid, per pull, a hop to the client loop thread and back (run_coroutine_threadsafe, a
concurrent future's condition), uvloop's reads plus two copies of the ~1 MiB answer (the frame
buffer, then the body), and the loop thread's GIL contention with the decode: in py-spy of the
workers the loop thread was about half of the busy samples. Here the task's thread writes its
requests itself and reads each answer with ``recv_into`` straight into one of the connection's
kept buffers (a fresh one while every kept one is still looked at); the body handed on is a view of
that buffer (the C decode copies each field once, into Arrow). The GIL is released while the thread
waits on the socket.

Answers are matched to requests by opaque, as the broker may answer out of order; an answer no
longer wanted (a pull sent ahead at a mispredicted offset, or a read stopped early) is read and
dropped when it arrives. ACL signing and TLS apply as on the client's connections.
"""

from __future__ import annotations

import itertools
import socket
import struct
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from sparkmq.errors import RemoteError
from sparkmq.protocol import RemotingCommand, RequestCode
from sparkmq.protocol.command import decode_payload

if TYPE_CHECKING:
    from sparkmq.client.security import ClientSecurity

CONNECT_TIMEOUT_S = 3.0
_LENGTHS = struct.Struct(">ii")  # frame length, serialize type << 24 | header length
_HEADER_LENGTH_MASK = 0xFFFFFF
MAX_ANSWER_BYTES = 64 * 1024 * 1024  # above the broker's largest pull answer; a bigger prefix is a bad frame
KEPT_BUFFERS = 3  # per connection: the answer being read, the one still being decoded, one read ahead
KEPT_BUFFER_BYTES = 8 * 1024 * 1024  # a bigger answer gets a buffer of its own, not kept
_PROBE = [bytearray()]
_FREE = sys.getrefcount(_PROBE[0])  # a kept buffer nothing else refers to, read as _buffer reads it
del _PROBE


class KeptBuffers:
    """Up to ``KEPT_BUFFERS`` buffers of at most ``KEPT_BUFFER_BYTES``, lent again once nothing refers to them.

    Memory in use already spares each ~1 MiB answer (or body read from the files) a zero fill and,
    when malloc has just given pages back, their page faults (docs/design-notes.md,
    "Kept answer buffers"). The C decode copies every field out; the numpy path's Arrow columns are views,
    and keep their buffer busy.
    """

    def __init__(self) -> None:
        self._kept: list[bytearray] = []

    def take(self, length: int) -> bytearray:
        """A buffer of at least ``length`` bytes that nothing else refers to (a kept one when free)."""
        if length > KEPT_BUFFER_BYTES:
            return bytearray(length)
        kept = self._kept
        for i in range(len(kept)):
            if sys.getrefcount(kept[i]) == _FREE:  # not bound to a name first: that would count too
                if len(kept[i]) < length:
                    kept[i] = bytearray(length)
                return kept[i]
        buffer = bytearray(length)
        if len(kept) < KEPT_BUFFERS:
            kept.append(buffer)
        return buffer

    def __len__(self) -> int:
        return len(self._kept)

    def __iter__(self) -> Iterator[bytearray]:
        return iter(self._kept)


class PullConnectionError(RemoteError):
    """The pull socket cannot connect, broke, timed out or read a bad frame: read through the client."""

    def __init__(self, remark: str) -> None:
        super().__init__(remark, retriable=True)


class PullConnection:
    """One blocking connection to a broker for PULL_MESSAGE requests and their answers.

    Not thread-safe: one reader at a time (``BrokerView`` lends it to one range read).
    """

    def __init__(self, address: str, security: ClientSecurity | None, timeout_s: float) -> None:
        self.address = address
        host, _, port = address.rpartition(":")
        try:
            sock = socket.create_connection((host, int(port)), timeout=CONNECT_TIMEOUT_S)
        except (OSError, ValueError) as exc:
            raise PullConnectionError(f"cannot connect to {address}: {exc}") from exc
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            context = security.ssl_context() if security is not None else None
            if context is not None:
                sock = context.wrap_socket(sock, server_hostname=host)
            sock.settimeout(timeout_s)
        except OSError as exc:
            sock.close()
            raise PullConnectionError(f"cannot connect to {address}: {exc}") from exc
        self._sock = sock
        self._tls = context is not None  # not isinstance(sock, ssl.SSLSocket): the driver side need not import ssl
        self._signer = security.signer() if security is not None else None
        self._opaques = itertools.count(1)
        self._arrived: dict[int, tuple[RemotingCommand, memoryview]] = {}
        self._unwanted: set[int] = set()
        self._head = bytearray(_LENGTHS.size)
        self._buffers = KeptBuffers()
        self._busy = False  # inside a send or a read: stopped there, the stream's position is unknown

    @property
    def signed(self) -> bool:
        """Whether the requests carry ACL credentials (the broker checks the account's permissions)."""
        return self._signer is not None

    @property
    def usable(self) -> bool:
        """False once a send or read stopped half-way (an exception, a timeout): close it then."""
        return not self._busy

    def alive(self) -> bool:
        """Whether the broker still holds the connection open (it closes idle ones): a look without waiting."""
        if self._tls:
            return True  # no peeking under TLS; a closed one fails the first pull and the range goes on
        timeout = self._sock.gettimeout()
        self._sock.settimeout(0.0)  # with a timeout set, Python would wait for data despite MSG_DONTWAIT
        try:
            return self._sock.recv(1, socket.MSG_PEEK) != b""
        except BlockingIOError:
            return True  # nothing to read: open and idle
        except OSError:
            return False
        finally:
            self._sock.settimeout(timeout)

    def send(self, fields: dict[str, str]) -> int:
        """Send one PULL_MESSAGE with these extFields; returns its opaque."""
        return self.send_request(RequestCode.PULL_MESSAGE, fields)

    def send_request(self, code: int, fields: dict[str, str], body: bytes = b"") -> int:
        """Send one request (signed when the connection has credentials); returns its opaque."""
        if self._signer is not None:
            fields = self._signer(fields, body)
        opaque = next(self._opaques)
        frame = RemotingCommand.request(code, opaque, ext_fields=fields, body=body).encode()
        self._busy = True
        try:
            self._sock.sendall(frame)
        except OSError as exc:  # TimeoutError included
            raise PullConnectionError(f"pull connection to {self.address} failed: {exc!r}") from exc
        self._busy = False
        return opaque

    def answer(self, opaque: int) -> tuple[RemotingCommand, memoryview]:
        """The answer to request ``opaque``: its command (body empty) and a view of its body."""
        while opaque not in self._arrived:
            command, body = self._read_frame()
            if command.opaque in self._unwanted:
                self._unwanted.discard(command.opaque)
            else:
                self._arrived[command.opaque] = (command, body)
        return self._arrived.pop(opaque)

    def forget(self, opaque: int) -> None:
        """Request ``opaque``'s answer is no longer wanted: drop it, now or when it arrives."""
        if self._arrived.pop(opaque, None) is None:
            self._unwanted.add(opaque)

    def close(self) -> None:
        self._sock.close()

    def _read_frame(self) -> tuple[RemotingCommand, memoryview]:
        self._busy = True
        self._receive(memoryview(self._head))
        length, mixed = _LENGTHS.unpack(self._head)
        header_end = 4 + (mixed & _HEADER_LENGTH_MASK)
        if not header_end <= length <= MAX_ANSWER_BYTES:
            raise PullConnectionError(f"bad frame from {self.address}: length {length}, header ends at {header_end}")
        view = memoryview(self._buffers.take(length))[:length]
        view[:4] = self._head[4:]
        self._receive(view[4:])
        self._busy = False
        # The header alone: decode_payload copies no body from a view that ends where the header does.
        return decode_payload(view[:header_end]), view[header_end:]

    def _receive(self, view: memoryview) -> None:
        while view:
            try:
                got = self._sock.recv_into(view)
            except OSError as exc:  # TimeoutError included
                raise PullConnectionError(f"pull connection to {self.address} failed: {exc!r}") from exc
            if got == 0:
                raise PullConnectionError(f"broker {self.address} closed the connection")
            view = view[got:]
