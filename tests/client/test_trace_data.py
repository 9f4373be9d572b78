"""The trace record codec: TraceDataEncoder's exact text, round trips, and damaged bodies as TraceDataError."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sparkmq.client.trace_data import (
    MESSAGE_TYPES,
    TRANSACTION_STATES,
    TraceBean,
    TraceContext,
    TraceType,
    decode,
    decode_body,
    encode,
)
from sparkmq.client.trace_dispatcher import TraceDispatcher
from sparkmq.client.trace_query import views_of
from sparkmq.errors import TraceDataError

# field text: anything but the two separators; "null" is how Java writes an absent value
text = st.text(st.characters(blacklist_characters="\x01\x02", blacklist_categories=("Cs",)), max_size=12).filter(
    lambda t: t != "null"
)
nullable = st.none() | text
number = st.integers(min_value=0, max_value=2**40)
small = st.integers(min_value=0, max_value=2**31 - 1)


@st.composite
def contexts(draw: st.DrawFn) -> TraceContext:
    kind = draw(st.sampled_from(list(TraceType)))
    bean = TraceBean(msg_id=draw(text), keys=draw(nullable))
    if kind in (TraceType.PUB, TraceType.END_TRANSACTION):
        bean = TraceBean(
            draw(text), bean.msg_id, "", draw(nullable), bean.keys, draw(text),
            msg_type=draw(st.integers(0, len(MESSAGE_TYPES) - 1)),
        )  # fmt: skip
    if kind is TraceType.PUB:
        bean = TraceBean(**{**bean.__dict__, "offset_msg_id": draw(text), "body_length": draw(small)})
        return TraceContext(kind, draw(number), draw(text), draw(text), draw(small), draw(st.booleans()),
                            beans=(bean,))  # fmt: skip
    if kind is TraceType.END_TRANSACTION:
        bean = TraceBean(
            **{**bean.__dict__, "transaction_id": draw(nullable),
               "transaction_state": draw(st.sampled_from(TRANSACTION_STATES)),
               "from_transaction_check": draw(st.booleans())},
        )  # fmt: skip
        return TraceContext(kind, draw(number), draw(text), draw(text), beans=(bean,))
    if kind is TraceType.SUB_BEFORE:
        bean = TraceBean(msg_id=bean.msg_id, keys=bean.keys, retry_times=draw(small))
        return TraceContext(kind, draw(number), draw(text), draw(text), request_id=draw(text), beans=(bean,))
    return TraceContext(
        kind, draw(number), "", draw(text), draw(small), draw(st.booleans()), draw(text), draw(st.integers(0, 4)),
        (bean,),
    )  # fmt: skip


@given(st.lists(contexts(), max_size=5))
def test_records_round_trip(batch: list[TraceContext]) -> None:
    data = "".join(encode(ctx)[0] for ctx in batch)
    assert decode(data) == batch
    assert decode_body(data.encode("utf-8")) == batch


@given(st.binary(max_size=200))
def test_any_body_decodes_or_raises_trace_data_error(body: bytes) -> None:
    try:
        decode_body(body)
    except TraceDataError as exc:
        assert exc.remark


@given(st.lists(contexts(), min_size=1, max_size=3), st.data())
def test_a_cut_body_decodes_or_raises_trace_data_error(batch: list[TraceContext], data: st.DataObject) -> None:
    text_ = "".join(encode(ctx)[0] for ctx in batch)
    cut = data.draw(st.integers(0, len(text_)))
    try:
        decoded = decode(text_[:cut])
    except TraceDataError:
        return
    assert len(decoded) <= len(batch)


def test_pub_record_is_trace_data_encoders_text() -> None:
    bean = TraceBean("orders", "ID1", "OFF1", None, "k1 k2", "127.0.0.1:10911", body_length=5, msg_type=0)
    ctx = TraceContext(TraceType.PUB, 1700000000000, "DefaultRegion", "PID_a", 3, True, beans=(bean,))
    data, keys = encode(ctx)
    fields = "Pub 1700000000000 DefaultRegion PID_a orders ID1 null k1 k2 127.0.0.1:10911 5 3 0 OFF1 true"
    assert data == "\x01".join(fields.replace("k1 k2", "k1\x00k2").split(" ")).replace("\x00", " ") + "\x02"
    assert keys == {"ID1", "k1", "k2"}


def test_sub_after_record_carries_the_context_code_time_and_group() -> None:
    bean = TraceBean(msg_id="ID1", keys=None)
    ctx = TraceContext(TraceType.SUB_AFTER, 17, "", "CID_a", 4, False, "REQ", 3, (bean, TraceBean(msg_id="ID2")))
    data, keys = encode(ctx)
    assert data == "SubAfter\x01REQ\x01ID1\x014\x01false\x01null\x013\x0117\x01CID_a\x02" + (
        "SubAfter\x01REQ\x01ID2\x014\x01false\x01\x013\x0117\x01CID_a\x02"
    )
    assert keys == {"ID1", "ID2"}


def test_java_records_of_older_clients_decode() -> None:
    # a 13-field Pub (no offsetMsgId) and a 6-field SubAfter (no context code, time or group)
    old = "Pub\x011\x01R\x01G\x01T\x01ID\x01t\x01k\x01h\x012\x013\x010\x01true\x02"
    old += "SubAfter\x01Q\x01ID\x015\x01true\x01k\x02"
    pub, after = decode(old)
    assert (pub.beans[0].offset_msg_id, pub.success, after.cost_ms, after.group) == ("", True, 5, "")
    assert [v.trace_type for v in views_of("ID", [pub, after], "10.0.0.1")] == [TraceType.PUB, TraceType.SUB_AFTER]
    assert views_of("OTHER", [pub, after], "10.0.0.1") == []


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ("Pub\x01x\x02", "Pub trace record has 2 fields"),
        ("Pub\x01t\x01R\x01G\x01T\x01ID\x01t\x01k\x01h\x012\x013\x010\x01true\x02", "timeStamp"),
        ("Pub\x011\x01R\x01G\x01T\x01ID\x01t\x01k\x01h\x012\x013\x019\x01true\x02", "msgType"),
        ("EndTransaction\x011\x01R\x01G\x01T\x01I\x01t\x01k\x01h\x012\x01X\x01MAYBE\x01true\x02", "transactionState"),
    ],
)
def test_damaged_records_name_what_is_wrong(body: str, named: str) -> None:
    with pytest.raises(TraceDataError, match=named):
        decode(body)


def test_unknown_and_empty_records_are_skipped_as_java_does() -> None:
    assert decode("Other\x01a\x02\x02") == []


def test_a_full_dispatcher_queue_drops_and_counts() -> None:
    dispatcher = TraceDispatcher(producer=None, queue_size=2)  # type: ignore[arg-type]  # never started: no sends
    ctx = TraceContext(TraceType.SUB_BEFORE, 1, beans=(TraceBean(msg_id="ID"),))
    assert [dispatcher.append(ctx) for _ in range(4)] == [True, True, False, False]
    assert dispatcher.dropped == 2
