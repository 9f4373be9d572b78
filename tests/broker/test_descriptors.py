"""A broker under a 256-descriptor limit with 600 topics: ConsumeQueue files no longer hold one
descriptor each, so sends, new connections and topics.json persistence keep working, and a
restart finds every topic and message."""

from __future__ import annotations

import asyncio
import resource
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sparkmq.message.properties import encode_properties
from sparkmq.message.record import iter_records
from sparkmq.protocol import PullSysFlag, RequestCode, ResponseCode
from sparkmq.remoting import RemotingClient
from support.processes import BrokerProcess

TOPICS = 600
DESCRIPTOR_LIMIT = 256


@contextmanager
def descriptor_limit(soft: int) -> Iterator[None]:
    """Processes started inside inherit a soft RLIMIT_NOFILE of ``soft``."""
    old_soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (old_soft, hard))


async def send_all(address: str) -> None:
    client = RemotingClient()
    try:
        for i in range(TOPICS):
            fields = {
                "a": "PID",
                "b": f"Many{i}",
                "c": "TBW102",
                "d": "1",
                "e": "0",
                "f": "0",
                "g": "1700000000000",
                "h": "0",
                "i": encode_properties({}).decode(),
            }
            response = await client.invoke(address, RequestCode.SEND_MESSAGE_V2, fields, f"m{i}".encode(), timeout=15.0)
            assert response.code == ResponseCode.SUCCESS, (i, response)
    finally:
        await client.close()


async def read_all(address: str) -> list[bytes]:
    client = RemotingClient()  # a new connection: accepting still works
    try:
        got = []
        for i in range(TOPICS):
            fields = {
                "consumerGroup": "G",
                "topic": f"Many{i}",
                "queueId": "0",
                "queueOffset": "0",
                "maxMsgNums": "8",
                "sysFlag": str(int(PullSysFlag.SUBSCRIPTION)),
                "commitOffset": "0",
                "suspendTimeoutMillis": "0",
                "subscription": "*",
                "subVersion": "0",
            }
            response = await client.invoke(address, RequestCode.PULL_MESSAGE, fields, timeout=15.0)
            assert response.code == ResponseCode.SUCCESS, (i, response)
            got += [bytes(m.body) for m in iter_records(response.body)]
        return got
    finally:
        await client.close()


def test_six_hundred_topics_under_a_256_descriptor_limit(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with descriptor_limit(DESCRIPTOR_LIMIT), BrokerProcess.start(store, None) as broker:
        asyncio.run(send_all(broker.address))
        assert asyncio.run(read_all(broker.address)) == [f"m{i}".encode() for i in range(TOPICS)]
        assert broker.stop() == 0
    assert "Too many open files" not in "\n".join(broker.output)
    with BrokerProcess.start(store, None) as again:  # topics.json and every queue came through
        assert asyncio.run(read_all(again.address)) == [f"m{i}".encode() for i in range(TOPICS)]
