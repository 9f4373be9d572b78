"""The C half of the native pull lane against the Python reference: ``scan_pulls`` reads a
PULL_MESSAGE header as ``PullMessageRequestHeader.from_fields`` does (or leaves the frame to it).
(The response frame is ``_queueread.gather_frame``'s, tested in test_queueread.py.)"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkmq.protocol import MAX_FRAME_BYTES, RemotingCommand, RequestCode
from sparkmq.protocol.frame import decode_frame
from sparkmq.protocol.headers import PullMessageRequestHeader

_sendlane = pytest.importorskip("sparkmq.native._sendlane")
_TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), min_size=1, max_size=20)
_DIGITS = st.integers(0, 2**31 - 1).map(str)


@st.composite
def pull_fields(draw: st.DrawFn) -> dict[str, str]:
    fields = {
        "consumerGroup": draw(_TEXT),
        "topic": draw(_TEXT),
        "queueId": draw(_DIGITS),
        "queueOffset": str(draw(st.integers(0, 2**63 - 1))),
        "maxMsgNums": draw(_DIGITS),
        "sysFlag": draw(_DIGITS),
        "commitOffset": str(draw(st.integers(-(2**63) + 1, 2**63 - 1))),
        "suspendTimeoutMillis": str(draw(st.integers(0, 2**63 - 1))),
        "subVersion": str(draw(st.integers(0, 2**63 - 1))),
    }
    for key in ("subscription", "expressionType", "bname", "ReqT"):  # the last two: ignored, as from_fields does
        if draw(st.booleans()):
            fields[key] = draw(_TEXT)
    return fields


@settings(max_examples=300, deadline=None)
@given(st.lists(pull_fields(), min_size=1, max_size=6))
def test_scan_pulls_reads_headers_as_from_fields(all_fields: list[dict[str, str]]) -> None:
    frames = [
        RemotingCommand.request(RequestCode.PULL_MESSAGE, i, ext_fields=f).encode() for i, f in enumerate(all_fields)
    ]
    items = _sendlane.scan_pulls(b"".join(frames), 0, 1024, MAX_FRAME_BYTES)
    assert len(items) == len(frames)
    end = 0
    for frame, item in zip(frames, items, strict=True):
        end += len(frame)
        command = decode_frame(frame)
        expected = PullMessageRequestHeader.from_fields(command.ext_fields)
        assert item[0] == end and item[1] == command.opaque
        assert PullMessageRequestHeader(*item[2:]) == expected


#: A PULL_MESSAGE header DefaultMQPullConsumer.pull of rocketmq-client 4.9.7 sent to a sparkmq broker (captured
#: off the broker's read buffer, references/runner/ClientBench.java's pull), with its bname and ReqT keys.
JAVA_497_PULL = (
    b'{"code":11,"extFields":{"queueId":"3","maxMsgNums":"32","sysFlag":"4","commitOffset":"0","subscription":"*",'
    b'"ReqT":"0","suspendTimeoutMillis":"20000","bname":"broker-a","topic":"BenchBatch","queueOffset":"64",'
    b'"expressionType":"TAG","subVersion":"0","consumerGroup":"bench_pull_cg"},"flag":0,"language":"JAVA",'
    b'"opaque":15,"serializeTypeCurrentRPC":"JSON","version":407}'
)


def test_the_java_clients_pull_is_the_lanes() -> None:
    frame = (4 + len(JAVA_497_PULL)).to_bytes(4) + len(JAVA_497_PULL).to_bytes(4) + JAVA_497_PULL
    items = _sendlane.scan_pulls(frame, 0, 1024, MAX_FRAME_BYTES)
    expected = PullMessageRequestHeader.from_fields(decode_frame(frame).ext_fields)
    assert len(items) == 1 and items[0][:2] == (len(frame), 15)
    assert PullMessageRequestHeader(*items[0][2:]) == expected


@pytest.mark.parametrize(
    "change",
    [
        {"queueId": "-1"},
        {"queueId": "+1"},
        {"queueId": "2147483648"},
        {"queueOffset": "x"},
        {"commitOffset": "--1"},
        {"topic": "a\x00b"},
        {"brokerName": "b"},
    ],
    ids=repr,
)
def test_pulls_the_lane_leaves_to_the_python_path(change: dict[str, str]) -> None:
    fields = {
        "consumerGroup": "G",
        "topic": "T",
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "32",
        "sysFlag": "0",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subVersion": "0",
    }
    good = RemotingCommand.request(RequestCode.PULL_MESSAGE, 1, ext_fields=fields).encode()
    bad = RemotingCommand.request(RequestCode.PULL_MESSAGE, 2, ext_fields={**fields, **change}).encode()
    assert [item[1] for item in _sendlane.scan_pulls(good + bad + good, 0, 1024, MAX_FRAME_BYTES)] == [1]
    missing = {k: v for k, v in fields.items() if k != "subVersion"}
    no_version = RemotingCommand.request(RequestCode.PULL_MESSAGE, 3, ext_fields=missing).encode()
    with_body = RemotingCommand.request(RequestCode.PULL_MESSAGE, 4, ext_fields=fields, body=b"x").encode()
    assert _sendlane.scan_pulls(no_version + with_body, 0, 1024, MAX_FRAME_BYTES) == []
