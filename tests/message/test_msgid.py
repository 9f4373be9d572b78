"""Offset msgIds (store host + physical offset), client unique ids (UNIQ_KEY) and IPv4-only hosts."""

from __future__ import annotations

import re
import struct
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkmq.errors import MessageError
from sparkmq.message import UniqueIdGenerator, decode_offset_msg_id, ipv4_bytes, offset_msg_id
from sparkmq.message.msgid import offset_msg_ids

HEX32 = re.compile(r"[0-9A-F]{32}")


@settings(max_examples=300, deadline=None)
@given(st.binary(min_size=4, max_size=4), st.integers(0, 65535), st.integers(0, 2**63 - 1))
def test_offset_msg_id_roundtrip(ip: bytes, port: int, offset: int) -> None:
    msg_id = offset_msg_id(ip, port, offset)
    assert HEX32.fullmatch(msg_id)
    assert bytes.fromhex(msg_id) == ip + struct.pack(">i", port) + struct.pack(">q", offset)
    assert decode_offset_msg_id(msg_id) == (".".join(map(str, ip)), port, offset)


def test_offset_msg_id_examples() -> None:
    assert offset_msg_id(b"\x7f\x00\x00\x01", 10911, 1024) == "7F00000100002A9F0000000000000400"
    assert offset_msg_id(b"\xc0\xa8\x00\x0a", 10911, 2**40 + 0xAB) == "C0A8000A00002A9F00000100000000AB"
    assert decode_offset_msg_id("C0A8000A00002A9F00000100000000AB") == ("192.168.0.10", 10911, 2**40 + 0xAB)


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "7F00000100002A9F000000000000040",  # 31 chars
        "7F00000100002A9F00000000000004000",  # 33 chars
        "7F00000100002A9F000000000000040G",  # not hex
        "7F00000100002A9F00000000000004\u00e9\u00e9",  # non-ASCII
        "7F 00 0100002A9F0000000000000004",  # 32 chars, but fromhex skips the spaces: 15 bytes
        "7F0000010000000000002A9F00000000000000000000000000000400",  # a 56-char (IPv6) id: not stored by sparkmq
    ],
)
def test_bad_offset_msg_ids(bad: str) -> None:
    with pytest.raises(MessageError):
        decode_offset_msg_id(bad)


def test_unique_ids_are_32_uppercase_hex_and_unique() -> None:
    gen = UniqueIdGenerator(ip=b"\x0a\x01\x02\x03")
    ids = [gen.next_id() for _ in range(10_000)]
    assert all(HEX32.fullmatch(i) for i in ids)
    assert len(set(ids)) == len(ids)
    assert all(i.startswith("0A010203") for i in ids)  # ip(4) first, as in Java's MessageClientIDSetter


def test_unique_ids_across_threads_and_generators() -> None:
    gen = UniqueIdGenerator()
    results: list[list[str]] = [[] for _ in range(4)]

    def work(out: list[str]) -> None:
        out.extend(gen.next_id() for _ in range(2000))

    threads = [threading.Thread(target=work, args=(r,)) for r in results]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ids = [i for r in results for i in r]
    assert len(set(ids)) == 8000
    assert UniqueIdGenerator().next_id()[:20] != UniqueIdGenerator().next_id()[:20]  # random part differs


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("1.2.3.4", b"\x01\x02\x03\x04"),
        ("::ffff:1.2.3.4", b"\x01\x02\x03\x04"),
        ("::ffff:192.168.10.200", bytes([192, 168, 10, 200])),
        ("10.0.0.0", b"\x0a\x00\x00\x00"),
        ("::1", b"\x7f\x00\x00\x01"),
        ("fe80::1", b"\x7f\x00\x00\x01"),
        ("2001:db8::8a2e:370:7334", b"\x7f\x00\x00\x01"),
    ],
)
def test_ipv4_bytes(host: str, expected: bytes) -> None:
    assert ipv4_bytes(host) == expected


@given(
    st.binary(min_size=4, max_size=4),
    st.integers(-(2**31), 2**31 - 1),
    st.lists(st.integers(0, 2**63 - 1), max_size=40),
)
def test_offset_msg_ids_joins_what_offset_msg_id_makes(ip: bytes, port: int, offsets: list[int]) -> None:
    expected = ",".join(offset_msg_id(ip, port, p) for p in offsets)
    assert offset_msg_ids(ip, port, offsets) == expected
    assert offset_msg_ids(ip, port, np.array(offsets, dtype=np.int64)) == expected
