"""Questions asked of master/slave broker processes over our own protocol code (tests/broker/ha, tests/e2e).

Each opens a fresh ``RemotingClient``, so a check never shares a connection with the clients under test.
"""

from __future__ import annotations

import asyncio
import itertools

from sparkmq.message.properties import encode_properties
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.bodies import TopicRouteData
from sparkmq.protocol.namesrv_bodies import TopicConfigSerializeWrapper
from sparkmq.remoting import RemotingClient
from support.processes import wait_until

UNTIL_S = 30.0
# broker flags shorter than the defaults: slaves link up and copy the topic table within a test's waits
FAST_HA = (
    "--set",
    "haSendHeartbeatInterval=200",
    "--set",
    "registerNameServerPeriod=500",
    "--set",
    "slaveSynchronizeInterval=200",
)


def ask(address: str, code: int, fields: dict[str, str] | None = None, body: bytes = b"") -> RemotingCommand:
    """One request over a fresh RemotingClient."""

    async def call() -> RemotingCommand:
        client = RemotingClient()
        try:
            return await client.invoke(address, code, fields or {}, body, timeout=10.0)
        finally:
            await client.close()

    return asyncio.run(call())


def send(address: str, topic: str, body: bytes, queue_id: int = 0) -> RemotingCommand:
    """SEND_MESSAGE_V2 as the Java client sends it."""
    fields = {
        "a": "PID_HA",
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": str(queue_id),
        "f": "0",
        "g": "1700000000000",
        "h": "0",
        "i": encode_properties({"WAIT": "true"}).decode(),
    }
    return ask(address, RequestCode.SEND_MESSAGE_V2, fields, body)


def max_offsets(address: str, topic: str, queues: int = 4) -> list[int]:
    answers = [ask(address, RequestCode.GET_MAX_OFFSET, {"topic": topic, "queueId": str(q)}) for q in range(queues)]
    return [int(a.ext_fields["offset"]) if a.code == ResponseCode.SUCCESS else -1 for a in answers]


def known_topics(address: str) -> set[str]:
    """The topics in a broker's own table (GET_ALL_TOPIC_CONFIG). A slave copies its master's every
    slaveSynchronizeInterval and answers a topic's pulls TOPIC_NOT_EXIST until then, as Java's does."""
    response = ask(address, RequestCode.GET_ALL_TOPIC_CONFIG)
    if response.code != ResponseCode.SUCCESS:
        return set()
    return set(TopicConfigSerializeWrapper.decode(response.body).topic_config_table)


def route_ids(namesrv: str, topic: str, broker: str) -> set[int]:
    """The broker ids of ``broker`` the NameServer routes ``topic`` to."""
    response = ask(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})
    if response.code != ResponseCode.SUCCESS:
        return set()
    return {
        i for b in TopicRouteData.decode(response.body).broker_datas if b.broker_name == broker for i in b.broker_addrs
    }


def wait_for_sync_link(master_address: str) -> None:
    """Probe sends until the SYNC_MASTER answers SUCCESS (the slave's link is up)."""
    probes = itertools.count()
    assert wait_until(
        lambda: send(master_address, "HaProbe", b"probe %d" % next(probes)).code == ResponseCode.SUCCESS, UNTIL_S
    ), "the slave never connected to the SYNC_MASTER"
