"""Fuzz: malformed frames against real broker and NameServer processes (hypothesis, bounded).

Each example sends one byte stream on a fresh connection (random bytes, bad length prefixes,
truncated frames, well-framed requests with hostile headers, or a mix), then a sentinel request,
and half-closes. The oracle is the sans-I/O decoder the server runs: every request it decodes
before the first bad frame (or an unfinished tail) must be answered, exactly once, and nothing
after it. Meanwhile a healthy client sends and reads back its own messages on another thread;
at the end nothing it was acknowledged is missing and both processes still serve.
"""

from __future__ import annotations

import json
import struct
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sparkmq.protocol import MAX_FRAME_BYTES, RemotingCommand, RequestCode
from support.hostile import HealthyLoop, exchange, expected_answers, raw_frame
from support.processes import BrokerProcess, NamesrvProcess

PROMPT_CODES = [  # answered at once (no long polling), so every decoded request has an answer to wait for
    RequestCode.UPDATE_AND_CREATE_TOPIC,
    RequestCode.GET_ROUTEINFO_BY_TOPIC,
    RequestCode.REGISTER_BROKER,
    RequestCode.UNREGISTER_BROKER,
    RequestCode.SEND_MESSAGE_V2,
    RequestCode.QUERY_CONSUMER_OFFSET,
    RequestCode.GET_MAX_OFFSET,
    RequestCode.GET_ALL_TOPIC_CONFIG,
    RequestCode.HEART_BEAT,
    RequestCode.GET_BROKER_CLUSTER_INFO,
    9999,
]
FIELD_NAMES = [
    "topic",
    "b",
    "a",
    "e",
    "d",
    "brokerName",
    "brokerAddr",
    "clusterName",
    "brokerId",
    "topicFilterType",
    "readQueueNums",
    "consumerGroup",
    "queueId",
    "remark",
]
SENTINEL_OPAQUE = 2**31 - 1

hostile_text = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["\ud800", "Nope\udfff", "a\x00b", "x" * 40_000, "9" * 5000, "-" + "1" * 4400, "", "TBW102"]),
)
HUGE = "__a JSON number of 5,000 digits__"  # json.dumps cannot write one: put in after dumping
hostile_int = st.one_of(st.integers(-(2**31), 2**31 - 1), st.sampled_from([2**31, -(2**63), HUGE]))
json_scalar = st.one_of(hostile_text, hostile_int, st.booleans(), st.none(), st.floats(allow_nan=False))
ext_fields = st.dictionaries(
    st.one_of(st.sampled_from(FIELD_NAMES), hostile_text),
    st.one_of(json_scalar, st.lists(st.integers(), max_size=2)),
    max_size=6,
)


@st.composite
def hostile_request(draw: st.DrawFn) -> bytes:
    """A well-framed request whose JSON header says anything (escapes for surrogates)."""
    header: dict[str, object] = {
        "code": draw(st.one_of(st.sampled_from(PROMPT_CODES), st.sampled_from(["17", "9" * 5000]), hostile_int)),
        "flag": draw(st.sampled_from([0, 0, 0, 1, 2, 3])),
        "language": draw(st.sampled_from(["JAVA", "CPP", 9, "???"])),
        "opaque": draw(st.integers(0, 2**31 - 2)),
        "version": draw(st.sampled_from([0, 317, 407])),
        "extFields": draw(ext_fields),
    }
    for key in draw(st.sets(st.sampled_from(list(header)), max_size=1)):
        del header[key]
    text = json.dumps(header).replace(json.dumps(HUGE), "9" * 5000)
    body = draw(st.one_of(st.just(b""), st.binary(max_size=64), st.just(b'{"topicList":["\\ud800"]}')))
    return raw_frame(text.encode(), body)


bad_length = st.builds(
    lambda n, tail: struct.pack(">I", n) + tail,
    st.sampled_from([0, 1, 3, MAX_FRAME_BYTES - 3, 2**31, 2**32 - 1]),
    st.binary(max_size=16),
)
truncated = st.builds(
    lambda frame, cut: frame[: max(1, int(len(frame) * cut))], hostile_request(), st.floats(0.0, 0.99)
)
piece = st.one_of(st.binary(max_size=64), bad_length, truncated, hostile_request(), hostile_request())
stream = st.lists(piece, min_size=1, max_size=4).map(b"".join)


@pytest.fixture(scope="module")
def services(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NamesrvProcess, BrokerProcess]]:
    store: Path = tmp_path_factory.mktemp("fuzz-store")
    with NamesrvProcess.start() as namesrv, BrokerProcess.start(store, namesrv.address) as broker:
        yield namesrv, broker


def sentinel(address_kind: str) -> bytes:
    code = RequestCode.GET_ALL_TOPIC_CONFIG if address_kind == "broker" else RequestCode.GET_BROKER_CLUSTER_INFO
    return RemotingCommand.request(code, SENTINEL_OPAQUE).encode()


def test_malformed_frames_never_hurt_the_services_or_a_healthy_client(services) -> None:
    namesrv, broker = services
    targets = {"broker": broker.address, "namesrv": namesrv.address}

    @settings(max_examples=200, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    @given(kind=st.sampled_from(sorted(targets)), data=stream)
    def one_peer(kind: str, data: bytes) -> None:
        sent = data + sentinel(kind)
        responses = exchange(targets[kind], sent)
        assert Counter(r.opaque for r in responses) == Counter(expected_answers(sent))
        assert all(r.is_response for r in responses)

    with HealthyLoop(broker.address) as healthy:
        healthy.wait_for_round_trips(1)
        one_peer()
        healthy.wait_for_round_trips(1)  # still served after every hostile peer
        healthy.stop()
    assert broker.process.poll() is None and namesrv.process.poll() is None
    logs = broker.output + namesrv.output
    assert not [line for line in logs if "Fatal error" in line or "UnicodeEncodeError" in line]
