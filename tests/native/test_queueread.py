"""The native queue read (``_queueread.gather`` behind store/reads.py) against read_queue's numpy
path: the same status, offsets and record bytes for every read, over a real store with tiny
segments (reads that cross CommitLog segments and ConsumeQueue files, blank fillers, interleaved
queues, tag filters, count and byte limits; reads across segments are native too: a run per
segment); and ``gather_frame`` (the pull lane's read) against
the PULL response the Python path encodes for the numpy read, byte for byte."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from sparkmq import native
from sparkmq.broker.processors.pull_lane import pull_template
from sparkmq.message import MessageBatch, encode_properties
from sparkmq.message import layout as L
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.headers import PullMessageResponseHeader
from sparkmq.store import GetMessageStatus, GetResult, MessageStore, reads
from sparkmq.store.dispatch import TagsCoder
from sparkmq.store.queue_repair import QueueDamage
from support.store_data import retained_store, tiny_config

queueread = pytest.importorskip("sparkmq.native._queueread")
TAG_CODES = {tag: TagsCoder([]).code(tag.encode()) for tag in ("TagA", "TagB", "TagC")}


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MessageStore]:
    s = MessageStore(tiny_config(Path(tmp_path_factory.mktemp("queueread")) / "store"))
    s.start()
    for i in range(120):  # two queues interleaved, sizes and tags varying: runs break, segments roll
        queue_id, tag = i % 2, ("TagA", "TagB", "TagA", "TagC")[i % 4]
        body = bytes([65 + i % 26]) * (20 + (i * 37) % 700)
        props = encode_properties({"TAGS": tag, "UNIQ_KEY": f"U{i}"})
        assert s.put_messages(MessageBatch("Q", queue_id, [body] * (1 + i % 3), [props] * (1 + i % 3))).ok
    try:
        yield s
    finally:
        s.close()


def _facts(result: GetResult) -> tuple[object, ...]:
    return (
        result.status,
        result.next_begin_offset,
        result.min_offset,
        result.max_offset,
        result.body() if result.buffers else b"",
        result.queue_offsets.tolist(),
        result.physical_offsets.tolist(),
        result.sizes.tolist(),
    )


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    queue_id=st.sampled_from([0, 1, 7]),
    offset=st.integers(0, 130),
    max_count=st.integers(1, 64),
    max_bytes=st.integers(1, 20_000),
    tags=st.one_of(st.none(), st.sets(st.sampled_from(sorted(TAG_CODES)), max_size=2)),
)
def test_native_and_numpy_reads_agree(
    store: MessageStore,
    monkeypatch: pytest.MonkeyPatch,
    queue_id: int,
    offset: int,
    max_count: int,
    max_bytes: int,
    tags: set[str] | None,
) -> None:
    codes = None if tags is None else {TAG_CODES[t] for t in tags}
    with monkeypatch.context() as patch:
        patch.setattr(reads, "queueread", None)
        numpy_read = store.get_messages("G", "Q", queue_id, offset, max_count, max_bytes, codes)
    with monkeypatch.context() as patch:
        patch.setattr(reads, "queueread", queueread)
        native_read = store.get_messages("G", "Q", queue_id, offset, max_count, max_bytes, codes)
    assert _facts(native_read) == _facts(numpy_read)


def test_the_native_read_serves_a_plain_read(store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[object] = []

    def counted(*args: object) -> object:
        calls.append(args[1])
        return queueread.gather(*args)

    monkeypatch.setattr(reads, "queueread", type("Spy", (), {"gather": staticmethod(counted)}))
    result = store.get_messages("G", "Q", 0, 0, 32)
    assert result.message_count == 32 and calls == [0]


def test_reads_of_removed_records_agree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """After retention deleted old segments (their units still in the ConsumeQueue), both paths
    answer MESSAGE_WAS_REMOVING or the records that remain, alike."""
    with retained_store(tmp_path / "s") as store:
        for offset in range(0, 600, 23):
            for max_count in (1, 32):
                with monkeypatch.context() as patch:
                    patch.setattr(reads, "queueread", None)
                    numpy_read = store.get_messages("G", "T", 0, offset, max_count)
                native_read = store.get_messages("G", "T", 0, offset, max_count)
                assert _facts(native_read) == _facts(numpy_read), offset


def _encoded_answer(result: GetResult, opaque: int, slow_below: int) -> bytes:
    """The PULL SUCCESS frame ``PullProcessor._response`` encodes for ``result`` (the reference)."""
    suggest = 1 if int(result.physical_offsets[-1]) < slow_below else 0
    fields = PullMessageResponseHeader(suggest, result.next_begin_offset, result.min_offset, result.max_offset)
    request = RemotingCommand.request(RequestCode.PULL_MESSAGE, opaque)
    return request.make_response(ResponseCode.SUCCESS, ext_fields=fields.to_fields(), body=result.body()).encode()


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    queue_id=st.sampled_from([0, 1, 7]),
    offset=st.integers(0, 130),
    max_count=st.integers(1, 64),
    max_bytes=st.integers(1, 20_000),
    tags=st.one_of(st.none(), st.sets(st.sampled_from(sorted(TAG_CODES)), max_size=2)),
    opaque=st.integers(-(2**31), 2**31 - 1),
    slow_below=st.integers(-1, 200_000),
)
def test_frames_are_the_encoders_answer_to_the_numpy_read(
    store: MessageStore,
    monkeypatch: pytest.MonkeyPatch,
    queue_id: int,
    offset: int,
    max_count: int,
    max_bytes: int,
    tags: set[str] | None,
    opaque: int,
    slow_below: int,
) -> None:
    """``read_frame`` (``gather_frame``) answers a read that finds records with the very bytes the
    Python path encodes for it, and nothing else (None: read_queue answers)."""
    codes = None if tags is None else {TAG_CODES[t] for t in tags}
    with monkeypatch.context() as patch:
        patch.setattr(reads, "queueread", None)
        numpy_read = store.get_messages("G", "Q", queue_id, offset, max_count, max_bytes, codes)
    parts = pull_template()
    assert parts is not None
    with monkeypatch.context() as patch:
        patch.setattr(reads, "queueread", queueread)
        framed = store.read_frame("Q", queue_id, offset, max_count, max_bytes, codes, (parts, opaque, 0, 1, slow_below))
    if numpy_read.status is not GetMessageStatus.FOUND:
        assert framed is None
    else:  # records across CommitLog segments too
        body = numpy_read.body()
        assert framed == (_encoded_answer(numpy_read, opaque, slow_below), numpy_read.message_count, len(body))


def test_a_plain_read_is_framed_natively(store: MessageStore, monkeypatch: pytest.MonkeyPatch) -> None:
    parts = pull_template()
    assert parts is not None
    monkeypatch.setattr(reads, "queueread", queueread)
    framed = store.read_frame("Q", 0, 0, 2, 1 << 20, None, (parts, 7, 0, 1, 0))
    assert framed is not None
    reference = store.get_messages("G", "Q", 0, 0, 2, 1 << 20)
    assert framed == (_encoded_answer(reference, 7, 0), 2, len(reference.body()))


def _spy(calls: list[object]) -> type:
    """``_queueread`` whose gathers append what they return to ``calls``."""

    def spied(name: str) -> object:
        def call(*args: object) -> object:
            result = getattr(queueread, name)(*args)
            calls.append(result)
            return result

        return staticmethod(call)

    return type("Spy", (), {"gather": spied("gather"), "gather_frame": spied("gather_frame")})


def _segments_of(result: GetResult, store: MessageStore) -> int:
    file_bytes = store.commitlog.queue.file_bytes
    return len({int(at) // file_bytes for at in result.physical_offsets})


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    queue_id=st.sampled_from([0, 1]),
    before=st.integers(0, 40),
    max_count=st.integers(2, 200),
    tags=st.one_of(st.none(), st.sets(st.sampled_from(sorted(TAG_CODES)), min_size=1, max_size=2)),
)
def test_reads_across_segment_boundaries_are_native(
    store: MessageStore,
    monkeypatch: pytest.MonkeyPatch,
    queue_id: int,
    before: int,
    max_count: int,
    tags: set[str] | None,
) -> None:
    """A read starting ``before`` records ahead of a CommitLog segment's end (with or without a tag
    filter) is answered by C, not the numpy path, and with the numpy path's very records and frame."""
    codes = None if tags is None else {TAG_CODES[t] for t in tags}
    with monkeypatch.context() as patch:
        patch.setattr(reads, "queueread", None)
        whole = store.get_messages("G", "Q", queue_id, 0, 10_000, 1 << 30)
    file_bytes = store.commitlog.queue.file_bytes
    crossings = [
        k
        for k in range(1, len(whole.physical_offsets))
        if whole.physical_offsets[k] // file_bytes != whole.physical_offsets[k - 1] // file_bytes
    ]
    offset = max(0, int(whole.queue_offsets[crossings[len(crossings) // 2]]) - before)
    with monkeypatch.context() as patch:
        patch.setattr(reads, "queueread", None)
        numpy_read = store.get_messages("G", "Q", queue_id, offset, max_count, 1 << 30, codes)
    calls: list[object] = []
    monkeypatch.setattr(reads, "queueread", _spy(calls))
    native_read = store.get_messages("G", "Q", queue_id, offset, max_count, 1 << 30, codes)
    assert _facts(native_read) == _facts(numpy_read)
    assert isinstance(calls[-1], tuple)  # C answered: no numpy fallback
    parts = pull_template()
    assert parts is not None
    framed = store.read_frame("Q", queue_id, offset, max_count, 1 << 30, codes, (parts, 5, 0, 1, 0))
    if numpy_read.status is GetMessageStatus.FOUND:
        assert framed == (_encoded_answer(numpy_read, 5, 0), numpy_read.message_count, len(numpy_read.body()))
        assert isinstance(calls[-1], tuple)


def test_segment_crossing_reads_happen(store: MessageStore) -> None:
    """The fixture's queues do cross segments within one read of 200 (the test above relies on it)."""
    read = store.get_messages("G", "Q", 0, 0, 200, 1 << 30)
    assert _segments_of(read, store) >= 3


def test_a_read_past_sixteen_segments_takes_the_numpy_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """More segments than one native read copies from: the numpy path answers, the same records."""
    with MessageStore(tiny_config(tmp_path / "store")) as wide:
        for i in range(30):
            assert wide.put_messages(MessageBatch("W", 0, [bytes([i]) * 900] * 16, [b""] * 16)).ok
        native_read = wide.get_messages("G", "W", 0, 0, 10_000, 1 << 30)
        assert _segments_of(native_read, wide) > reads.MAX_READ_SEGMENTS
        with monkeypatch.context() as patch:
            patch.setattr(reads, "queueread", None)
            numpy_read = wide.get_messages("G", "W", 0, 0, 10_000, 1 << 30)
        assert _facts(native_read) == _facts(numpy_read)
        calls: list[object] = []
        with monkeypatch.context() as patch:
            patch.setattr(reads, "queueread", _spy(calls))
            short = wide.get_messages("G", "W", 0, 0, 200, 1 << 30)
        assert _segments_of(short, wide) > 2 and isinstance(calls[-1], tuple)  # up to 16 segments: native
        with monkeypatch.context() as patch:
            patch.setattr(reads, "queueread", None)
            assert _facts(short) == _facts(wide.get_messages("G", "W", 0, 0, 200, 1 << 30))


@pytest.mark.skipif(native.queueread is None, reason="the pull lane's buffer is C's alone (SPARKMQ_NATIVE=0)")
@pytest.mark.parametrize("reserve", [0, 64, 1 << 20])
def test_frames_appended_to_one_buffer_are_the_frames_back_to_back(store: MessageStore, reserve: int) -> None:
    """``read_frame`` into ``out`` (the pull lane's one buffer per call) appends each frame as
    ``read_frame`` without it returns it, whatever the buffer's starting room."""
    parts = pull_template()
    assert parts is not None
    reads_args = [(0, 0, 5, None), (1, 3, 40, None), (0, 30, 64, {TAG_CODES["TagA"]}), (1, 50, 200, None)]
    out, frames = bytearray(), []
    for opaque, (queue_id, offset, max_count, codes) in enumerate(reads_args):
        alone = store.read_frame("Q", queue_id, offset, max_count, 1 << 20, codes, (parts, opaque, 0, 1, 0))
        appended = store.read_frame(
            "Q", queue_id, offset, max_count, 1 << 20, codes, (parts, opaque, 0, 1, 0), out, reserve
        )
        assert alone is not None and appended is not None and isinstance(alone[0], bytes)
        frames.append(alone[0])
        assert appended == (len(out), alone[1], alone[2])
    assert bytes(out) == b"".join(frames)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    queue_id=st.sampled_from([0, 1]),
    offset=st.integers(0, 130),
    max_count=st.integers(1, 64),
    room=st.integers(0, 30_000),
)
def test_gather_into_copies_what_gather_copies(
    store: MessageStore, queue_id: int, offset: int, max_count: int, room: int
) -> None:
    """``gather_into`` (local reads of the files, connector/local_reads.py) takes the records ``gather``
    takes, into ``out`` when they fit (else into a bytes of their own), and finds every head true."""
    queue = store.consume_queue("Q", queue_id)
    assert queue is not None
    if offset >= queue.max_offset:
        return
    window = min(max_count, queue.max_offset - offset)
    plain = reads._gather(queueread.gather, store.commitlog, queue, offset, window, max_count, 1 << 30, None)
    out = bytearray(room)
    into = reads._gather(queueread.gather_into, store.commitlog, queue, offset, window, max_count, 1 << 30, None, out)
    assert plain is not None and into is not None
    scanned, _removed, taken, body, *_ = plain
    assert into[:2] == (scanned, taken)
    written = into[2]
    assert (bytes(out[:written]) if isinstance(written, int) else written) == (body or b"")
    assert isinstance(written, int) == (len(body or b"") <= room)


def test_gather_into_names_the_first_record_unlike_its_unit(store: MessageStore) -> None:
    """Asked as another queue's reader, every record disagrees with what it is read as: the first
    unit is named damaged (-1 - its index) and nothing is copied."""
    queue = store.consume_queue("Q", 0)
    assert queue is not None
    mapped = store.commitlog.queue.files[0]
    with mapped.view() as view:
        segments = ((mapped.start_offset, view, mapped.write_position),)
        out = bytearray(1 << 20)
        read = queueread.gather_into(queue.read_unit_bytes(0, 8), 0, 0, None, 8, 1 << 30, segments, 1, b"Q", out)
        del view, segments
    assert read == -1 and not any(out)


def _outcome(
    store: MessageStore, queue_id: int, offset: int, max_count: int, codes: set[int] | None, native_read: bool
) -> tuple[object, ...]:
    """``read_queue``'s answer, or the damaged unit it names (no repair: the store's retry does that)."""
    saved = reads.queueread
    reads.queueread = queueread if native_read else None
    try:
        result = reads.read_queue(
            store.commitlog, store.consume_queue("Q", queue_id), offset, max_count, 1 << 20, codes
        )
    except QueueDamage as damage:
        return ("damaged", damage.queue_offset)
    finally:
        reads.queueread = saved
    return _facts(result)


_UNIT_DAMAGE = st.one_of(
    st.tuples(st.just("size"), st.integers(-(2**31), 2**31 - 1)),
    st.tuples(st.just("offset"), st.integers(-(2**40), 2**40)),
    st.tuples(st.just("near"), st.integers(-400, 400)),  # into another record, or the middle of one
    st.tuples(st.just("bytes"), st.binary(min_size=20, max_size=20)),
    st.tuples(st.just("head"), st.tuples(st.integers(0, 35), st.integers(1, 255))),  # a byte of its record's head
    st.tuples(st.just("topic"), st.integers(1, 255)),  # its record's topic byte: another topic's record
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    queue_id=st.sampled_from([0, 1]),
    damage=st.lists(st.tuples(st.integers(0, 90), _UNIT_DAMAGE), min_size=1, max_size=3),
    offset=st.integers(0, 100),
    max_count=st.integers(1, 64),
    tags=st.one_of(st.none(), st.sets(st.sampled_from(sorted(TAG_CODES)), max_size=2)),
)
# unit 1 moved 80 bytes back reads its record's magic code as a body length: the "topic" byte then lies before the file
@example(queue_id=0, damage=[(1, ("near", -80)), (1, ("topic", 1))], offset=0, max_count=8, tags=None)
def test_native_and_numpy_reads_agree_on_damaged_units(
    store: MessageStore,
    queue_id: int,
    damage: list[tuple[int, tuple[str, object]]],
    offset: int,
    max_count: int,
    tags: set[str] | None,
) -> None:
    """Units and record heads damaged on the files: the C walk and the numpy path answer the same read
    or name the same first damaged unit, and the C never copies with what it read unchecked (a
    crash here would be the worker's death in a Spark local read)."""
    queue = store.consume_queue("Q", queue_id)
    assert queue is not None
    codes = None if tags is None else {TAG_CODES[t] for t in tags}
    restore: list[tuple[object, int, bytes]] = []
    try:
        for unit, (kind, value) in damage:
            if unit >= queue.max_offset:
                continue
            mapped = queue.files.find(unit * 20)
            assert mapped is not None
            at = unit * 20 - mapped.start_offset
            old = mapped.read(at, 20)
            physical = int.from_bytes(old[:8], "big", signed=True)
            if kind in ("head", "topic"):
                segment = store.commitlog.queue.find(physical)
                where = physical - (segment.start_offset if segment else 0)
                if segment is None or where + L.POS_BODY > segment.write_position:
                    continue  # a unit damaged before: no record to damage
                if kind == "topic":
                    body_length = int.from_bytes(segment.read(where + L.POS_BODY_LENGTH, 4), "big", signed=True)
                    where, flip = where + L.POS_BODY + body_length + 1, value
                else:
                    assert isinstance(value, tuple)
                    where, flip = where + value[0], value[1]
                if not 0 <= where < segment.write_position:  # a body length read from a unit damaged before
                    continue
                restore.append((segment, where, segment.read(where, 1)))
                segment.rewrite(where, bytes([segment.read(where, 1)[0] ^ int(flip)]))  # type: ignore[call-overload]
                continue
            if kind == "size":
                new = old[:8] + int(value).to_bytes(4, "big", signed=True) + old[12:]  # type: ignore[call-overload]
            elif kind == "offset":
                new = int(value).to_bytes(8, "big", signed=True) + old[8:]  # type: ignore[call-overload]
            elif kind == "near":
                new = (physical + int(value)).to_bytes(8, "big", signed=True) + old[8:]  # type: ignore[call-overload]
            else:
                assert isinstance(value, bytes)
                new = value
            restore.append((mapped, at, old))
            mapped.rewrite(at, new)
        native_outcome = _outcome(store, queue_id, offset, max_count, codes, True)
        numpy_outcome = _outcome(store, queue_id, offset, max_count, codes, False)
        assert native_outcome == numpy_outcome
        event(f"outcome: {numpy_outcome[0]}")
        if offset < queue.max_offset:
            try:
                framed = reads.read_frame(
                    store.commitlog, queue, offset, max_count, 1 << 20, codes, (pull_template(), 1, 0, 1, -1)
                )
            except QueueDamage as met:
                assert numpy_outcome == ("damaged", met.queue_offset)
            else:  # None: read_queue answers it (and names the damaged unit as above)
                assert framed is None or numpy_outcome[0] != "damaged"
    finally:
        for mapped, at, old in reversed(restore):
            mapped.rewrite(at, old)  # type: ignore[attr-defined]
