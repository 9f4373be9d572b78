"""A read that finds nothing buffered goes to the lanes as the read's own bytes
(``RemotingConnection._serve_read``), and only what they leave goes into the decoder.

Over one real socket to a real broker, reads mix lane sends with requests the lanes leave
(GET_MAX_OFFSET) and with a frame cut in two: a lane send first and the rest decoded, a
declined request first and a send behind it, a frame's head left buffered and finished by the
next read. Every request gets its own answer once, each send is stored once in the order it
was written, and each GET_MAX_OFFSET sees exactly the sends written before it; with ASYNC and
SYNC flush.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sparkmq import native
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.frame import FrameDecoder
from sparkmq.protocol.namesrv_bodies import TopicConfig
from sparkmq.remoting.connection import FrameLane
from sparkmq.remoting.turns import LONE_TURNS
from sparkmq.store.config import FlushDiskType
from support.broker_wire import Wire, run_broker, send_frame

pytestmark = pytest.mark.skipif(native.sendlane is None, reason="native lane off or not built")

TOPIC = "ReadsTopic"


def _max_offset(opaque: int) -> bytes:
    fields = {"topic": TOPIC, "queueId": "0"}
    return RemotingCommand.request(RequestCode.GET_MAX_OFFSET, opaque, ext_fields=fields).encode()


def _send(opaque: int, queue_id: int = 0) -> bytes:
    return send_frame(opaque, f"m{opaque}".encode(), TOPIC, queue_id=str(queue_id))


def _watched(lane: FrameLane | None) -> tuple[FrameLane, list[tuple[str, int]]]:
    """``lane`` wrapped to record, per call, the type of buffer it was given and the bytes it took."""
    assert lane is not None, "the lane was built"
    calls: list[tuple[str, int]] = []

    def watched(buffer: bytes | bytearray, position: int, connection: object) -> int:
        end = lane(buffer, position, connection)  # type: ignore[arg-type]
        calls.append((type(buffer).__name__, end - position))
        return end

    return watched, calls


async def _answers(reader: asyncio.StreamReader, decoder: FrameDecoder, count: int) -> list[RemotingCommand]:
    answers: list[RemotingCommand] = []
    while len(answers) < count:
        data = await reader.read(65536)
        assert data, f"connection closed after {len(answers)} answers"
        answers += decoder.feed(data)
    return answers


@pytest.mark.parametrize("flush", [FlushDiskType.ASYNC_FLUSH, FlushDiskType.SYNC_FLUSH])
def test_reads_mixing_lane_sends_other_requests_and_a_cut_frame(tmp_path: Path, flush: FlushDiskType) -> None:
    ping = _max_offset(2)
    # (bytes written at once, the opaques answered once the broker has read them)
    writes = [
        (_send(1) + ping[:9], [1]),  # a lane send, then the head of a frame: left buffered
        (ping[9:], [2]),  # finishes the buffered frame (the decoder's way)
        (_send(3), [3]),  # nothing buffered again: the lane's read
        (_max_offset(4) + _send(5) + _send(6), [4, 5, 6]),  # the lane declines the first: all decoded
        (_send(7) + _max_offset(8) + _send(9), [7, 8, 9]),  # the lane's send, then the rest decoded
        (_send(10) + _send(11), [10, 11]),  # two lane sends in one read
        (_max_offset(12), [12]),
    ]
    sends = [1, 3, 5, 6, 7, 9, 10, 11]
    # GET_MAX_OFFSET -> the sends written before it
    expected_offsets = {2: 1, 4: 2, 8: 5, 12: 8}

    async def scenario(w: Wire) -> None:
        w.broker.context.topics.put(TopicConfig(TOPIC, 4, 4, 6))
        server = w.broker.server
        reader, writer = await asyncio.open_connection("127.0.0.1", w.broker.config.listen_port)
        decoder, answers = FrameDecoder(), {}
        try:
            for i in range(2 * LONE_TURNS):  # one reader a turn: its reads are served as they come
                writer.write(_send(100 + i, queue_id=1))
                assert [a.code for a in await _answers(reader, decoder, 1)] == [ResponseCode.SUCCESS]
            watched, calls = _watched(server.lane)
            server.lane = watched
            budget, charged = server.frame_budget, []
            for data, opaques in writes:
                writer.write(data)
                for answer in await _answers(reader, decoder, len(opaques)):
                    assert answer.opaque not in answers, f"answered twice: {answer}"
                    answers[answer.opaque] = answer
                assert set(opaques) <= set(answers)
                charged.append(budget.used)  # the read was served before its answers came back
        finally:
            writer.close()
            await writer.wait_closed()
        # the cut frame's head is charged to the shared budget until its rest arrives, then nothing is
        assert charged == [9] + [0] * (len(writes) - 1), charged
        # writes 1, 3 and 5 arrive with nothing buffered (on loopback each write is one read)
        assert calls.count(("bytes", len(_send(3)))) >= 3, calls
        for opaque in sends:
            assert answers[opaque].code == ResponseCode.SUCCESS, answers[opaque]
        assert [int(answers[o].ext_fields["queueOffset"]) for o in sends] == list(range(len(sends)))
        for opaque, offset in expected_offsets.items():
            assert answers[opaque].code == ResponseCode.SUCCESS, answers[opaque]
            assert int(answers[opaque].ext_fields["offset"]) == offset
        stored = await w.pull_records("CID_READS", TOPIC, 0)
        assert [bytes(r.body) for r in stored] == [f"m{o}".encode() for o in sends]

    run_broker(tmp_path, scenario, flush_disk_type=flush)


def test_the_decoders_buffer_is_one_object_for_its_life() -> None:
    """A connection checks the decoder's buffer itself for "nothing buffered" (``front``'s promise)."""
    frame = RemotingCommand(code=34, opaque=7).encode()
    decoder = FrameDecoder()
    buffer = decoder.front()[0]
    decoder.receive_data(frame + frame[:5])
    assert decoder.next_command() is not None and buffer
    decoder.receive_data(frame[5:])
    assert decoder.front()[0] is buffer
    assert decoder.skip_to(len(buffer)) and not buffer
    decoder.receive_data(frame)
    assert decoder.next_command() is not None and not buffer
    assert decoder.front()[0] is buffer
