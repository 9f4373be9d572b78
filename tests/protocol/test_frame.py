"""FrameDecoder: any chunking gives the same commands; bad frames raise the precise error."""

from __future__ import annotations

import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkmq.errors import FrameTooLargeError, ProtocolError
from sparkmq.protocol import MAX_FRAME_BYTES, FrameDecoder, LanguageCode, RemotingCommand, SerializeType, decode_frame

COMMANDS = [
    RemotingCommand(code=105, opaque=0, ext_fields={"topic": "TopicTest"}),
    RemotingCommand(code=10, opaque=1, ext_fields={"queueId": "0", "properties": "TAGS\x01A\x02"}, body=b"hello"),
    RemotingCommand(code=0, opaque=1, flag=1, ext_fields={"msgId": "7F00"}, remark="ok"),
    RemotingCommand(
        code=11, opaque=2**31 - 1, language=LanguageCode.CPP, version=63, remark="", body=bytes(range(256))
    ),
]
STREAM = b"".join(c.encode() for c in COMMANDS)


def feed_in_chunks(decoder: FrameDecoder, data: bytes, sizes: list[int]) -> list[RemotingCommand]:
    out: list[RemotingCommand] = []
    position, index = 0, 0
    while position < len(data):
        size = sizes[index % len(sizes)] if sizes else len(data)
        out += decoder.feed(data[position : position + size])
        position += size
        index += 1
    return out


def test_whole_stream_in_one_chunk() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(STREAM) == COMMANDS
    assert decoder.buffered_bytes == 0


def test_one_byte_at_a_time() -> None:
    decoder = FrameDecoder()
    out = [cmd for i in range(len(STREAM)) for cmd in decoder.feed(STREAM[i : i + 1])]
    assert out == COMMANDS
    assert decoder.buffered_bytes == 0


def test_every_two_chunk_split() -> None:
    for split in range(1, len(STREAM)):
        decoder = FrameDecoder()
        assert decoder.feed(STREAM[:split]) + decoder.feed(STREAM[split:]) == COMMANDS, split


def test_partial_frame_is_buffered_until_complete() -> None:
    frame = COMMANDS[1].encode()
    decoder = FrameDecoder()
    assert decoder.feed(frame[:3]) == []
    assert decoder.buffered_bytes == 3
    assert decoder.feed(frame[3:-1]) == []
    assert decoder.buffered_bytes == len(frame) - 1
    assert decoder.feed(frame[-1:] + frame[:10]) == [COMMANDS[1]]
    assert decoder.buffered_bytes == 10
    assert decoder.feed(b"") == []


def test_receive_data_and_next_command() -> None:
    decoder = FrameDecoder()
    decoder.receive_data(STREAM)
    assert [decoder.next_command() for _ in COMMANDS] == COMMANDS
    assert decoder.next_command() is None


def test_commands_before_a_bad_frame_are_available_one_by_one() -> None:
    bad = struct.pack(">II", 6, 2) + b"{}"
    decoder = FrameDecoder()
    decoder.receive_data(COMMANDS[0].encode() + bad + COMMANDS[1].encode())
    assert decoder.next_command() == COMMANDS[0]
    with pytest.raises(ProtocolError, match="no 'code'"):
        decoder.next_command()
    assert decoder.failed


def test_decoder_stays_failed() -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameTooLargeError):
        decoder.feed(b"\xff\xff\xff\xff")
    for call in (lambda: decoder.feed(STREAM), decoder.next_command, lambda: decoder.receive_data(b"")):
        with pytest.raises(ProtocolError, match="already failed") as info:
            call()
        assert isinstance(info.value.__cause__, FrameTooLargeError)


@pytest.mark.parametrize("prefix", [b"\x80\x00\x00\x00", b"\xff\xff\xff\xff", struct.pack(">I", MAX_FRAME_BYTES - 3)])
def test_length_over_the_maximum_fails_as_soon_as_the_prefix_arrives(prefix: bytes) -> None:
    decoder = FrameDecoder()
    with pytest.raises(FrameTooLargeError, match="exceeds the maximum"):
        decoder.feed(prefix)


def test_length_at_the_maximum_is_accepted_and_buffered() -> None:
    decoder = FrameDecoder()
    assert decoder.feed(struct.pack(">I", MAX_FRAME_BYTES - 4) + b"\x00") == []
    assert decoder.buffered_bytes == 5


@pytest.mark.parametrize("length", [0, 1, 3])
def test_length_below_the_minimum(length: int) -> None:
    with pytest.raises(ProtocolError, match="below the minimum") as info:
        FrameDecoder().feed(struct.pack(">I", length) + b"\x00" * 8)
    assert type(info.value) is ProtocolError


def test_custom_maximum() -> None:
    frame = COMMANDS[3].encode()
    assert FrameDecoder(max_frame_bytes=len(frame)).feed(frame) == [COMMANDS[3]]
    with pytest.raises(FrameTooLargeError):
        FrameDecoder(max_frame_bytes=len(frame) - 1).feed(frame)
    with pytest.raises(ValueError):
        FrameDecoder(max_frame_bytes=7)


def test_empty_payload_frame_is_a_bad_header_not_a_crash() -> None:
    with pytest.raises(ProtocolError, match="not valid JSON"):
        FrameDecoder().feed(struct.pack(">II", 4, 0))


def test_large_frame_in_small_chunks_is_linear() -> None:
    body = bytes(range(256)) * (8 * 4096)  # 8 MiB
    frame = RemotingCommand(code=10, opaque=9, body=body).encode()
    decoder = FrameDecoder()
    started = time.perf_counter()
    out = [cmd for i in range(0, len(frame), 1024) for cmd in decoder.feed(frame[i : i + 1024])]
    assert time.perf_counter() - started < 5  # quadratic re-slicing would take minutes
    assert len(out) == 1 and out[0].body == body
    assert decoder.buffered_bytes == 0


def test_decode_frame_requires_exactly_one_frame() -> None:
    with pytest.raises(ProtocolError, match="exactly one frame"):
        decode_frame(STREAM)
    with pytest.raises(ProtocolError, match="exactly one frame"):
        decode_frame(COMMANDS[0].encode()[:-1])


# --- properties ------------------------------------------------------------------------------

text = st.text(max_size=40)
commands = st.builds(
    RemotingCommand,
    code=st.integers(-(2**31), 2**31 - 1),
    language=st.sampled_from(LanguageCode),
    version=st.integers(-(2**31), 2**31 - 1),
    opaque=st.integers(-(2**31), 2**31 - 1),
    flag=st.integers(-(2**31), 2**31 - 1),
    remark=st.none() | text,
    ext_fields=st.dictionaries(text, text, max_size=8),
    body=st.binary(max_size=300),
)


@given(cmds=st.lists(commands, min_size=1, max_size=5), sizes=st.lists(st.integers(1, 64), max_size=10))
@settings(max_examples=200, suppress_health_check=[HealthCheck.too_slow])
def test_round_trip_json_any_chunking(cmds: list[RemotingCommand], sizes: list[int]) -> None:
    stream = b"".join(c.encode() for c in cmds)
    assert feed_in_chunks(FrameDecoder(), stream, sizes) == cmds


@given(cmds=st.lists(commands, min_size=1, max_size=5), sizes=st.lists(st.integers(1, 64), max_size=10))
@settings(max_examples=200)
def test_round_trip_binary_any_chunking(cmds: list[RemotingCommand], sizes: list[int]) -> None:
    requests = [
        RemotingCommand(
            code=c.code % 2**15,
            language=c.language,
            version=c.version % 2**15,
            opaque=c.opaque,
            flag=c.flag & ~1,
            remark=c.remark or None,  # an empty remark travels as length 0, i.e. null
            ext_fields=c.ext_fields,
            body=c.body,
            serialize_type=SerializeType.ROCKETMQ,
        )
        for c in cmds
    ]
    stream = b"".join(c.encode_rocketmq() for c in requests)
    assert feed_in_chunks(FrameDecoder(), stream, sizes) == requests


@given(data=st.binary(max_size=2000), sizes=st.lists(st.integers(1, 100), max_size=10))
@settings(max_examples=300)
def test_random_bytes_only_ever_raise_protocol_errors(data: bytes, sizes: list[int]) -> None:
    decoder = FrameDecoder()
    try:
        for cmd in feed_in_chunks(decoder, data, sizes):
            assert isinstance(cmd, RemotingCommand)
    except ProtocolError:
        assert decoder.failed
    assert decoder.failed or decoder.buffered_bytes < MAX_FRAME_BYTES


@given(
    header=st.binary(max_size=200),
    serialize_type=st.sampled_from([0, 1]),
    body=st.binary(max_size=20),
)
@settings(max_examples=300)
def test_random_headers_only_ever_raise_protocol_errors(header: bytes, serialize_type: int, body: bytes) -> None:
    frame = struct.pack(">II", 4 + len(header) + len(body), (serialize_type << 24) | len(header)) + header + body
    try:
        command = decode_frame(frame)
    except ProtocolError as exc:
        assert exc.remark  # a described protocol error, never another exception
    else:
        assert command.body == body
