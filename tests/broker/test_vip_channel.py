"""The VIP channel: the broker also serves on listenPort - 2 (RocketMQ's ``fastListenPort``).

RocketMQ 4.x clients have ``vipChannelEnabled`` on by default and send their sends, offset and admin
requests to that port; tests/interop/java/test_differential.py runs the Java client against it.
"""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.remoting import RemotingClient
from support.processes import BrokerProcess, NamesrvProcess, wait_until


def _runtime_info(address: str) -> tuple[int, bytes]:
    async def call() -> tuple[int, bytes]:
        client = RemotingClient()
        try:
            response = await client.invoke(address, RequestCode.GET_BROKER_RUNTIME_INFO, {})
        finally:
            await client.close()
        return response.code, response.body

    return asyncio.run(call())


def _send(address: str, topic: str, body: bytes) -> tuple[int, dict[str, str]]:
    async def call() -> tuple[int, dict[str, str]]:
        client = RemotingClient()
        header = {
            "producerGroup": "vip_pg",
            "topic": topic,
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": "4",
            "queueId": "0",
            "sysFlag": "0",
            "bornTimestamp": "0",
            "flag": "0",
            "properties": "",
            "reconsumeTimes": "0",
            "unitMode": "false",
            "batch": "false",
        }
        try:
            response = await client.invoke(address, RequestCode.SEND_MESSAGE, header, body)
        finally:
            await client.close()
        return response.code, response.ext_fields

    return asyncio.run(call())


def test_a_broker_on_a_free_port_serves_the_same_requests_on_port_minus_two(tmp_path: Path) -> None:
    with NamesrvProcess.start() as namesrv, BrokerProcess.start(tmp_path / "store", namesrv.address) as broker:
        vip = f"127.0.0.1:{broker.port - 2}"
        code, body = _runtime_info(vip)
        assert code == ResponseCode.SUCCESS and b"brokerVersion" in body
        sent, fields = _send(vip, "VipTopic", b"through the VIP channel")
        assert sent == ResponseCode.SUCCESS, fields
        # One store behind both ports: the main port sees what the VIP port wrote.
        assert _send(broker.address, "VipTopic", b"through the main port")[1]["queueOffset"] == "1"


def test_a_fixed_port_whose_vip_port_is_taken_still_serves_its_own(tmp_path: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1] + 2
        with BrokerProcess.start(tmp_path / "store", None, port=port) as broker:
            assert broker.port == port
            assert _runtime_info(broker.address)[0] == ResponseCode.SUCCESS
            assert wait_until(lambda: any("serving without it" in line for line in broker.output), 10.0)
