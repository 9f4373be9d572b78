"""Message ids: the broker's offset msgId and the client's unique id (``UNIQ_KEY``).

Offset msgId = uppercase hex of ``storeIP(4) | int32 storePort | int64 physicalOffset``
(``MessageDecoder.createMessageId``). The unique id is opaque to the broker; sparkmq's
own clients make 32 uppercase hex chars in Java's shape: ip(4) pid(2) random(4)
ms-since-month-start(4) counter(2).
"""

from __future__ import annotations

import ipaddress
import itertools
import os
import struct
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime

import numpy as np
import numpy.typing as npt

from sparkmq.errors import MessageError

_OFFSET_ID = struct.Struct(">4siq")
_OFFSET_ID_ROW = np.dtype([("ip", "S4"), ("port", ">i4"), ("offset", ">i8")])  # _OFFSET_ID as a numpy row
_COMMA = ord(",")
_HEX2 = tuple(f"{byte:02X}" for byte in range(256))  # a counter's two bytes: ~half the time of :04X


def ipv4_bytes(host: str) -> bytes:
    """Four address bytes for a host; IPv4-mapped IPv6 is unwrapped, other IPv6 becomes 127.0.0.1.

    sparkmq never stores IPv6 hosts: the C++ and ali-ons decoders ignore the v6 sysFlag bits.
    """
    if host.startswith("::ffff:"):
        host = host[7:]
    try:
        return ipaddress.IPv4Address(host).packed
    except ValueError:
        return b"\x7f\x00\x00\x01"


def offset_msg_id(store_ip: bytes, store_port: int, physical_offset: int) -> str:
    """The broker-generated msgId of a stored record.

    >>> offset_msg_id(b"\\x7f\\x00\\x00\\x01", 10911, 1024)
    '7F00000100002A9F0000000000000400'
    """
    return _OFFSET_ID.pack(store_ip, store_port, physical_offset).hex().upper()


def offset_msg_ids(store_ip: bytes, store_port: int, physical_offsets: npt.NDArray[np.int64] | Sequence[int]) -> str:
    """``offset_msg_id`` of each offset, comma-joined (a batch's SEND response), in a few numpy steps.

    >>> offset_msg_ids(b"\\x7f\\x00\\x00\\x01", 10911, [1024, 1100])
    '7F00000100002A9F0000000000000400,7F00000100002A9F000000000000044C'
    """
    if len(physical_offsets) <= 8:  # a single send's: the numpy steps' fixed cost is more than the loop
        return ",".join([_OFFSET_ID.pack(store_ip, store_port, p).hex().upper() for p in list(physical_offsets)])
    offsets = np.asarray(physical_offsets, dtype=np.int64)
    n = len(offsets)
    rows = np.empty(n, dtype=_OFFSET_ID_ROW)
    rows["ip"], rows["port"], rows["offset"] = store_ip, store_port, offsets
    text = np.empty((n, 33), dtype=np.uint8)
    text[:, :32] = np.frombuffer(rows.tobytes().hex().upper().encode("ascii"), dtype=np.uint8).reshape(n, 32)
    text[:, 32] = _COMMA
    return text.tobytes()[:-1].decode("ascii")


def decode_offset_msg_id(msg_id: str) -> tuple[str, int, int]:
    """(store host, store port, physical offset) of an IPv4 offset msgId."""
    if len(msg_id) != 32:
        raise MessageError(f"offset msgId {msg_id!r} is not 32 hex characters")
    try:
        ip, port, offset = _OFFSET_ID.unpack(bytes.fromhex(msg_id))
    except (ValueError, struct.error) as exc:  # struct.error: fromhex skips spaces, leaving < 16 bytes
        raise MessageError(f"offset msgId {msg_id!r} is not hexadecimal") from exc
    return str(ipaddress.IPv4Address(ip)), port, offset


class UniqueIdGenerator:
    """Makes client unique message ids (the ``UNIQ_KEY`` property), thread-safe.

    >>> len(UniqueIdGenerator().next_id())
    32
    """

    def __init__(self, ip: bytes = b"\x7f\x00\x00\x01") -> None:
        self._prefix = (ip + struct.pack(">H", os.getpid() & 0xFFFF) + os.urandom(4)).hex().upper()
        self._counter = itertools.count()  # next() on it is atomic under the GIL
        self._lock = threading.Lock()
        self._month_start_ms = 0
        self._next_month_ms = 0

    def _new_month(self, now_ms: int) -> None:
        with self._lock:
            if now_ms < self._next_month_ms:
                return
            now = datetime.now(UTC)
            start = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
            following = (
                start.replace(year=start.year + 1, month=1)
                if start.month == 12
                else start.replace(month=start.month + 1)
            )
            self._month_start_ms = int(start.timestamp() * 1000)
            self._next_month_ms = int(following.timestamp() * 1000)

    def next_id(self) -> str:
        """A new 32-character uppercase hex id."""
        now_ms = int(time.time() * 1000)
        if now_ms >= self._next_month_ms:
            self._new_month(now_ms)
        stamp = (now_ms - self._month_start_ms) & 0xFFFFFFFF
        return f"{self._prefix}{stamp:08X}{next(self._counter) & 0xFFFF:04X}"

    def next_ids(self, count: int) -> list[str]:
        """``count`` new ids sharing one clock read (a batch's).

        >>> ids = UniqueIdGenerator().next_ids(3)
        >>> len(set(ids)), ids[0][:28] == ids[2][:28]
        (3, True)
        """
        now_ms = int(time.time() * 1000)
        if now_ms >= self._next_month_ms:
            self._new_month(now_ms)
        head = f"{self._prefix}{(now_ms - self._month_start_ms) & 0xFFFFFFFF:08X}"
        return [f"{head}{_HEX2[n >> 8 & 0xFF]}{_HEX2[n & 0xFF]}" for n in itertools.islice(self._counter, count)]
