"""Damaged-input fuzzing of every C entry point that reads bytes from a socket or a file.

Frames (sends as sparkmq and the C++ client write them, pulls), PULL bodies and the records in them,
SEND_BATCH bodies, ConsumeQueue units over CommitLog segments, and whole store directories are
damaged the ways disks and peers damage them (bytes overwritten, a length or size field set to 0,
-1, a huge or a negative int32, bytes inserted or dropped, the tail cut) and handed to the C. What
the C takes must be what the Python reference reads from the same bytes, and what it declines is
left to that reference; `make native-check` runs these on the AddressSanitizer + UBSan build, where
a read or write outside a buffer fails the run even when the answer looks right.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkmq.broker.processors.pull_lane import pull_template
from sparkmq.connector import local_reads
from sparkmq.connector.arrow import records_to_arrow
from sparkmq.connector.columns import LEAN_COLUMNS, source_columns
from sparkmq.connector.local_reads import LocalQueueReads, StoreFiles
from sparkmq.errors import MessageError, SparkmqError
from sparkmq.message import Host, MessageBatch, batch, encode_properties, encode_records
from sparkmq.protocol import MAX_FRAME_BYTES, RemotingCommand, RequestCode
from sparkmq.protocol.frame import decode_frame
from sparkmq.protocol.headers import PullMessageRequestHeader
from sparkmq.store import MessageStore
from support.native_lane import batch_frame, check_parity, cpp_fields, scan, send_frame, v1_frame
from support.store_data import make_batch, tiny_config

_sendlane = pytest.importorskip("sparkmq.native._sendlane")
_queueread = pytest.importorskip("sparkmq.native._queueread")
_batchitems = pytest.importorskip("sparkmq.native._batchitems")
_leanrecords = pytest.importorskip("sparkmq.connector._leanrecords")

FUZZ = settings(deadline=None)
STORE_HOST = Host(b"\x0a\x00\x00\x02", 10911)
#: Values a damaged length, size or offset field takes: the edges of every signed and unsigned width.
_FIELDS = [0, 1, 4, 19, 20, 0x7F, 0xFF, 0x7FFF, 0xFFFF, 2**31 - 1, 2**31, 2**32 - 1, 2**63 - 1, 2**63, 2**64 - 1]


@st.composite
def damaged(draw: st.DrawFn, data: bytes, at_most: int = 4) -> bytes:
    """``data`` with 1..``at_most`` damages: a byte overwritten, a 4- or 8-byte big-endian field set to an
    edge value, bytes inserted or dropped; then the tail cut anywhere (or not)."""
    out = bytearray(data)
    for _ in range(draw(st.integers(1, at_most))):
        at = draw(st.integers(0, max(len(out) - 1, 0)))
        kind = draw(st.sampled_from(["byte", "int32", "int64", "insert", "drop"]))
        if kind == "byte" and out:
            out[at] = draw(st.integers(0, 255))
        elif kind in ("int32", "int64"):
            width = 4 if kind == "int32" else 8
            value = draw(st.sampled_from(_FIELDS)) % (1 << (8 * width))
            out[at : at + width] = value.to_bytes(width, "big")
        elif kind == "insert":
            out[at:at] = draw(st.binary(min_size=1, max_size=24))
        else:
            del out[at : at + draw(st.integers(1, 24))]
    return bytes(out[: draw(st.one_of(st.just(len(out)), st.integers(0, len(out))))])


# -- frames: the send lane's scan and the pull lane's scan_pulls ---------------------------------------------


@st.composite
def frame_streams(draw: st.DrawFn) -> list[bytes]:
    """One read's worth of requests: sparkmq's SEND_MESSAGE_V2, the C++ client's SEND_MESSAGE, the Java
    client's SEND_BATCH_MESSAGE, PULL_MESSAGE."""
    frames = []
    for opaque in range(draw(st.integers(1, 5))):
        kind = draw(st.sampled_from(["v2", "v1", "batch", "pull"]))
        queue = draw(st.integers(0, 7))
        body = draw(st.binary(max_size=64))
        if kind == "v2":
            properties = f"UNIQ_KEY\x01U{opaque}\x02KEYS\x01{draw(st.sampled_from(['a', 'a b', '']))}\x02TAGS\x01t"
            frames.append(send_frame(opaque, queue_id=str(queue), body=body, properties=properties))
        elif kind == "v1":
            frames.append(v1_frame(opaque, cpp_fields(queueId=queue), body))
        elif kind == "batch":
            keys = draw(st.sampled_from(["a", "a b", ""]))
            items = [
                (body[i:], f"UNIQ_KEY\x01U{i}\x02KEYS\x01{keys}".encode(), i) for i in range(draw(st.integers(1, 4)))
            ]
            frames.append(batch_frame(opaque, items, queue_id=str(queue)))
        else:
            fields = {"consumerGroup": "G", "topic": "TopicA", "queueId": str(queue), "queueOffset": "3"}
            fields |= {"maxMsgNums": "32", "sysFlag": "2", "commitOffset": "0", "suspendTimeoutMillis": "15000"}
            fields["subVersion"] = "0"
            frames.append(RemotingCommand.request(RequestCode.PULL_MESSAGE, opaque, ext_fields=fields).encode())
    return frames


def _whole_frames(buffer: bytes, start: int, end: int) -> list[bytes]:
    """The frames from ``start`` to ``end`` by their length prefixes; ``end`` must be a frame boundary."""
    frames, position = [], start
    while position < end:
        length = int.from_bytes(buffer[position : position + 4])
        frames.append(buffer[position : position + 4 + length])
        position += 4 + length
    assert position == end, "the C took part of a frame"
    return frames


@FUZZ
@given(st.data())
def test_damaged_frames_are_taken_whole_and_read_as_python_reads_them(data: st.DataObject) -> None:
    buffer = data.draw(frame_streams().flatmap(lambda frames: damaged(b"".join(frames))))
    group = scan(buffer)
    if group is not None:
        taken = _whole_frames(buffer, 0, group.end)
        assert group.count == len(taken)
        check_parity(taken, len(taken))
    start = data.draw(st.integers(0, len(buffer)))
    padded = memoryview(b"\xff" * 3 + buffer + b"\x00" * 3)[3:-3]  # a view whose neighbours are not zeros
    items = _sendlane.scan_pulls(padded, start, 1024, MAX_FRAME_BYTES)
    ends = [item[0] for item in items]
    assert ends == sorted(set(ends)) and all(start < end <= len(buffer) for end in ends)
    for frame, item in zip(_whole_frames(buffer, start, ends[-1] if ends else start), items, strict=True):
        command = decode_frame(frame)
        assert command.code == RequestCode.PULL_MESSAGE and item[1] == command.opaque
        assert PullMessageRequestHeader(*item[2:]) == PullMessageRequestHeader.from_fields(command.ext_fields)


# -- records: a PULL body as the Spark source decodes it (leanrecords.c) ------------------------------------


def _pull_body(count: int, body_bytes: int) -> bytes:
    bodies = [bytes([65 + i % 26]) * (body_bytes + i) for i in range(count)]
    properties = [encode_properties({"TAGS": "t", "KEYS": f"k{i} x", "UNIQ_KEY": f"U{i}"}) for i in range(count)]
    made = MessageBatch("ArrowT", 2, bodies, properties, born_timestamp=1_700_000_000_000)
    return encode_records(made, 0, count, 10, 4096, 1_700_000_000_123, STORE_HOST)


@FUZZ
@given(st.integers(1, 6).flatmap(lambda count: damaged(_pull_body(count, 10), at_most=6)))
@pytest.mark.parametrize("columns", [LEAN_COLUMNS, source_columns(include_properties=True)])
def test_damaged_pull_bodies_are_declined_or_decoded_as_numpy_decodes_them(
    columns: tuple[str, ...], body: bytes
) -> None:
    """The lean columns, and with them the properties map (damaged separators, names and values)."""
    if _leanrecords.decode(body, "properties" in columns) is None:
        return
    native = records_to_arrow(body, "broker-a", columns=columns, topic="ArrowT")
    reference = records_to_arrow(body, "broker-a", columns=columns, topic="ArrowT", native=False)
    native.validate(full=True)
    assert native.equals(reference)


@pytest.mark.parametrize("stamp", [-(2**63), -72_055_894_037_927_813, 2**63 - 1, 9_223_372_036_854_776])
def test_stamps_past_the_microsecond_range_wrap_as_numpy_wraps_them(stamp: int) -> None:
    """A damaged born or store time whose microseconds overflow int64 (UB in C unless done unsigned)."""
    made = MessageBatch("ArrowT", 2, [b"x"], [encode_properties({"TAGS": "t"})], born_timestamp=stamp)
    body = encode_records(made, 0, 1, 10, 4096, stamp, STORE_HOST)
    assert _leanrecords.decode(body, False) is not None  # the C takes it
    native = records_to_arrow(body, "broker-a", columns=LEAN_COLUMNS, topic="ArrowT")
    assert native.equals(records_to_arrow(body, "broker-a", columns=LEAN_COLUMNS, topic="ArrowT", native=False))


# -- SEND_BATCH_MESSAGE bodies (batchitems.c) ------------------------------------------------------------------


@FUZZ
@given(
    st.lists(st.tuples(st.binary(max_size=40), st.binary(max_size=30)), min_size=1, max_size=6)
    .map(lambda items: batch.encode_batch_items([b for b, _p in items], [p for _b, p in items], None))
    .flatmap(lambda body: damaged(body, at_most=6))
)
def test_damaged_batch_bodies_are_declined_or_decoded_as_python_decodes_them(body: bytes) -> None:
    try:
        with pytest.MonkeyPatch.context() as python_only:
            python_only.setattr(batch, "_native", None)  # message/batch.py's reference path
            expected = batch.decode_batch_items(body)
    except MessageError:
        assert _batchitems.decode(body) is None
    else:
        made = _batchitems.decode(body)
        assert made is not None and batch.BatchItems(*made) == expected


_UNIT = 20
_PULL_PARTS = pull_template()


# -- whole store directories: recovery, reads, index queries and new puts over damaged files ----------------


@pytest.fixture(scope="module")
def healthy_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("healthy") / "store"
    store = MessageStore(tiny_config(root))
    store.start()
    for i in range(8):
        assert store.put_messages(make_batch("S", i % 2, 10, start=10 * i, body_bytes=40 + 30 * i)).ok
    store.close()
    return root


def _data_files(root: Path, folder: str) -> list[Path]:
    """The files of ``folder`` (commitlog, consumequeue or index) the C reads: those named by a number."""
    return sorted(path for path in (root / folder).rglob("*") if path.is_file() and path.name.isdigit())


@st.composite
def damages(draw: st.DrawFn, files: list[Path]) -> list[tuple[Path, int, bytes]]:
    """1..6 (file, position, bytes): 4 bytes anywhere set to an edge value, or in a ConsumeQueue file a
    unit's offset, size or tags code set to one."""
    made = []
    for _ in range(draw(st.integers(1, 6))):
        path, value = draw(st.sampled_from(files)), draw(st.sampled_from(_FIELDS))
        if path.parent.parent.parent.name == "consumequeue" and draw(st.booleans()):
            at, width = draw(st.sampled_from([(0, 8), (8, 4), (12, 8)]))
            at += _UNIT * draw(st.integers(0, path.stat().st_size // _UNIT - 1))
        else:
            at, width = draw(st.integers(0, path.stat().st_size - 4)), 4
        made.append((path, at, (value % (1 << (8 * width))).to_bytes(width)))
    return made


def _damaged_copy(healthy: Path, scratch: str, folder: str, data: st.DataObject) -> Path:
    root = Path(scratch) / "store"
    shutil.copytree(healthy, root)
    for path, at, value in data.draw(damages(_data_files(root, folder))):
        with path.open("r+b") as file:
            file.seek(at)
            file.write(value)
    return root


@pytest.mark.parametrize("folder", ["commitlog", "consumequeue", "index"])
@settings(deadline=None, max_examples=25)
@given(st.data())
def test_a_store_with_damaged_files_is_read_and_written_within_its_mappings(
    healthy_store: Path, folder: str, data: st.DataObject
) -> None:
    """The store opened on damaged files: every queue read to its end, by ``get_messages`` and as pull
    frames, keys queried, new messages put. Each step may refuse with a named error; the C it runs
    stays inside its buffers and mappings."""
    with tempfile.TemporaryDirectory() as scratch:
        store = MessageStore(tiny_config(_damaged_copy(healthy_store, scratch, folder, data)))
        try:
            store.start()
            for queue_id in (0, 1):
                offset = store.min_offset_in_queue("S", queue_id)
                while offset < store.max_offset_in_queue("S", queue_id):
                    result = store.get_messages("G", "S", queue_id, offset, 16)
                    store.read_frame("S", queue_id, offset, 16, 1 << 20, None, (_PULL_PARTS, 1, 0, 1, 0))
                    offset = max(result.next_begin_offset, offset + 1)
            store.query_messages("S", "key5", 32)
            store.put_messages(make_batch("S", 0, 5, start=100))
            store.query_messages("S", "key101", 32)
        except SparkmqError:
            pass  # a named refusal
        finally:
            store.close()


@settings(deadline=None, max_examples=25)
@given(st.data())
def test_local_reads_of_damaged_files_stay_within_their_mappings(healthy_store: Path, data: st.DataObject) -> None:
    """The files as a Spark task reads them beside the broker: every queue read to its end, each read
    served or declined with a named error (LocalReadDeclined), never a crash."""
    if local_reads.queueread is None:
        pytest.skip("SPARKMQ_NATIVE=0 turns local reads off: the source pulls from the broker")
    with tempfile.TemporaryDirectory() as scratch:
        root = _damaged_copy(healthy_store, scratch, "consumequeue", data)
        config = tiny_config(root)
        files = StoreFiles(
            str(root / "commitlog"),
            str(root / "consumequeue"),
            config.commitlog_file_bytes,
            config.consume_queue_units_per_file * _UNIT,
        )
        for queue_id in (0, 1):
            with LocalQueueReads(files, "S", queue_id) as local:
                offset = 0
                while offset < 40:
                    try:
                        offset = max(local.read(offset, 16)[1], offset + 1)
                    except SparkmqError:
                        offset += 1
