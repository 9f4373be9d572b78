"""The real C++ client's sends go through the broker's native send lane, and come back whole.

The broker runs in this process (so the test can see which frames its lane took) beside a
NameServer process; ``cpp_client.py produce`` sends with the real client (PyPI rocketmq 0.4.4),
one ``send_sync`` at a time, and ``pull-consume`` reads every message back with it. Each read the
lane sees is decoded again here to know which frames it took and which it left.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest

from sparkmq import native
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.frame import FrameDecoder
from sparkmq.remoting import RemotingClient
from support.broker_wire import Wire, run_broker
from support.processes import NamesrvProcess
from support.rocketmq_cpp import CppClientRun, require_cpp_python

pytestmark = pytest.mark.skipif(native.sendlane is None, reason="native lane off or not built")

COUNT = 200
CLIENT_TIMEOUT_S = 90.0
ROUTE_TIMEOUT_S = 30.0


async def _route_known(namesrv: str, topic: str) -> None:
    """Until the NameServer has ``topic``'s route (the broker registers when a topic is created)."""
    client = RemotingClient()
    deadline = time.monotonic() + ROUTE_TIMEOUT_S
    try:
        while True:
            response = await client.invoke(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
            if response.code == ResponseCode.SUCCESS:
                return
            assert time.monotonic() < deadline, f"no route for {topic} after {ROUTE_TIMEOUT_S} s"
            await asyncio.sleep(0.05)
    finally:
        await client.close()


def test_cpp_sends_go_through_the_lane_and_are_read_back(tmp_path: Path) -> None:
    require_cpp_python()
    topic = "CppLaneTopic"
    outcome: dict[str, Any] = {}
    with NamesrvProcess.start() as namesrv:

        async def scenario(w: Wire) -> None:
            server = w.broker.server
            lane = server.lane
            assert lane is not None
            taken: list[int] = []
            declined, behind = [], []

            def counted(buffer: bytearray, position: int, connection: Any) -> int:
                end = lane(buffer, position, connection)
                taken.extend(command.code for command in FrameDecoder().feed(bytes(buffer[position:end])))
                rest = [command.code for command in FrameDecoder().feed(bytes(buffer[end:]))]
                declined.extend(rest[:1] if rest[:1] == [RequestCode.SEND_MESSAGE] else [])  # the lane stopped at it
                behind.extend(code for code in rest[1:] if code == RequestCode.SEND_MESSAGE)  # after a heartbeat, say
                return end

            server.lane = counted
            await w.send_ok(topic, b"create", queue_id=0)  # made by the Python path; then registered
            await _route_known(namesrv.address, topic)
            loop = asyncio.get_running_loop()
            runs: list[CppClientRun] = []
            try:
                args = ("--namesrv", namesrv.address, "--topic", topic)
                runs.append(
                    CppClientRun.start(tmp_path / "p", "produce", *args, "--group", "PID_LANE", "--count", str(COUNT))
                )
                outcome["sent"] = await loop.run_in_executor(None, runs[-1].finish, CLIENT_TIMEOUT_S)
                outcome["lane_sends"] = taken.count(RequestCode.SEND_MESSAGE)
                outcome["declined"], outcome["behind"] = len(declined), len(behind)
                runs.append(
                    CppClientRun.start(
                        tmp_path / "c", "pull-consume", *args, "--group", "CID_LANE", "--count", str(COUNT + 1)
                    )
                )
                outcome["received"] = await loop.run_in_executor(None, runs[-1].finish, CLIENT_TIMEOUT_S)
            finally:
                for run in runs:
                    run.kill()

        run_broker(tmp_path / "store", scenario, namesrv_addr=namesrv.address)

    sent = [r for r in outcome["sent"] if r["event"] == "sent"]
    assert len(sent) == COUNT and all(r["status"] == 0 for r in sent), sent[:3]
    # The lane takes the leading run of a read: a send that shares a read with a heartbeat before it
    # is the Python path's; the lane itself never stopped before a C++ send.
    assert outcome["declined"] == 0
    assert outcome["lane_sends"] + outcome["behind"] == COUNT and outcome["lane_sends"] > COUNT // 2, outcome
    received = {r["id"]: r for r in outcome["received"] if r["event"] == "received" and r["body"] != "create"}
    assert sorted(received) == sorted(r["msg_id"] for r in sent)
    for result in sent:
        message = received[result["msg_id"]]
        index = result["index"]
        assert (message["body"], message["tags"], message["keys"]) == (
            f"m-body-{index}",
            f"Tag{index % 3}",
            f"key-{index}",
        )
        assert message["properties"]["seq"] == str(index)
        assert message["queue_offset"] == result["offset"]
