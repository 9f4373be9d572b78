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
from support.broker_wire import Wire, run_broker
from support.processes import BrokerProcess, wait_until


def _runtime_info(address: str) -> tuple[int, bytes]:
    async def call() -> tuple[int, bytes]:
        client = RemotingClient()
        try:
            response = await client.invoke(address, RequestCode.GET_BROKER_RUNTIME_INFO, {})
        finally:
            await client.close()
        return response.code, response.body

    return asyncio.run(call())


def test_a_broker_on_a_free_port_serves_the_same_requests_on_port_minus_two(tmp_path: Path) -> None:
    async def scenario(wire: Wire) -> None:
        port = wire.broker.config.listen_port
        assert wire.broker.server.companion_port == port - 2
        vip = Wire(wire.broker)
        vip.address = f"127.0.0.1:{port - 2}"
        try:
            info = await vip.call(RequestCode.GET_BROKER_RUNTIME_INFO)
            assert info.code == ResponseCode.SUCCESS and b"brokerVersion" in info.body
            assert (await vip.send_ok("VipTopic", b"through the VIP channel"))["queueOffset"] == "0"
        finally:
            await vip.close()
        # One store behind both ports: the main port sees what the VIP port wrote.
        assert (await wire.send_ok("VipTopic", b"through the main port"))["queueOffset"] == "1"

    run_broker(tmp_path, scenario)


def test_a_fixed_port_whose_vip_port_is_taken_still_serves_its_own(tmp_path: Path) -> None:
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", 0))
        blocker.listen()
        port = blocker.getsockname()[1] + 2
        with BrokerProcess.start(tmp_path / "store", None, port=port) as broker:
            assert broker.port == port
            assert _runtime_info(broker.address)[0] == ResponseCode.SUCCESS
            assert wait_until(lambda: any("serving without it" in line for line in broker.output), 10.0)
