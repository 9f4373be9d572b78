"""The real NameServer on a free loopback port, spoken to with real frames via RemotingClient."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import pytest

from sparkmq.namesrv import NameServer, NamesrvConfig
from sparkmq.namesrv.processors import body_crc32
from sparkmq.protocol import LanguageCode, RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.admin_headers import RegisterBrokerRequestHeader, UnRegisterBrokerRequestHeader
from sparkmq.protocol.bodies import TopicList, TopicRouteData
from sparkmq.protocol.namesrv_bodies import (
    ClusterInfo,
    DataVersion,
    RegisterBrokerBody,
    TopicConfig,
    TopicConfigSerializeWrapper,
)
from sparkmq.remoting import RemotingClient

CLUSTER = "DefaultCluster"
BROKER_A, BROKER_B = "127.0.0.1:10911", "127.0.0.1:10931"
ROUTE_JSON = (
    b'{"brokerDatas":[{"brokerAddrs":{"0":"127.0.0.1:10911"},"brokerName":"broker-a","cluster":"DefaultCluster"}],'
    b'"filterServerTable":{},'
    b'"queueDatas":[{"brokerName":"broker-a","perm":6,"readQueueNums":4,"topicSysFlag":0,"writeQueueNums":4}]}'
)

Body = Callable[[NameServer, RemotingClient, str], Awaitable[None]]


def run(body: Body, *, scan_interval_s: float = 10.0, broker_expired_s: float = 120.0) -> None:
    async def main() -> None:
        config = NamesrvConfig("127.0.0.1", 0, scan_interval_s=scan_interval_s, broker_expired_s=broker_expired_s)
        async with NameServer(config) as namesrv:
            client = RemotingClient()
            try:
                await body(namesrv, client, namesrv.address)
            finally:
                await client.close()

    asyncio.run(main())


def register_body(counter: int, *topics: str, queues: int = 4) -> bytes:
    table = {t: TopicConfig(t, queues, queues) for t in topics}
    return RegisterBrokerBody(TopicConfigSerializeWrapper(table, DataVersion(1_700_000_000_000, counter))).encode()


async def register(
    client: RemotingClient,
    namesrv: str,
    addr: str,
    name: str,
    *topics: str,
    broker_id: int = 0,
    counter: int = 1,
    cluster: str = CLUSTER,
) -> RemotingCommand:
    body = register_body(counter, *topics)
    header = RegisterBrokerRequestHeader(
        name, addr, cluster, addr.replace("109", "119"), broker_id, body_crc32=body_crc32(body)
    )
    return await client.invoke(namesrv, RequestCode.REGISTER_BROKER, header.to_fields(), body)


async def route_of(client: RemotingClient, namesrv: str, topic: str) -> RemotingCommand:
    return await client.invoke(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": topic})


async def wait_until_gone(client: RemotingClient, namesrv: str, topic: str, within_s: float) -> float:
    """Poll the route of ``topic`` until TOPIC_NOT_EXIST; return how long that took."""
    loop = asyncio.get_running_loop()
    started = loop.time()
    while (await route_of(client, namesrv, topic)).code != ResponseCode.TOPIC_NOT_EXIST:
        assert loop.time() - started < within_s, f"route of {topic} still there after {within_s} s"
        await asyncio.sleep(0.01)
    return loop.time() - started


def test_register_then_route_has_the_exact_json_shape() -> None:
    async def body(namesrv: NameServer, client: RemotingClient, address: str) -> None:
        registered = await register(client, address, BROKER_A, "broker-a", "TopicTest", "TBW102")
        assert (registered.code, registered.ext_fields, json.loads(registered.body)) == (0, {}, {"table": {}})

        response = await route_of(client, address, "TopicTest")
        assert (response.code, response.remark, response.body) == (ResponseCode.SUCCESS, None, ROUTE_JSON)
        assert TopicRouteData.decode(response.body).broker_datas[0].master_addr == BROKER_A

    run(body)


def test_a_cpp_shaped_request_gets_the_route_and_unknown_topics_get_17() -> None:
    async def body(namesrv: NameServer, client: RemotingClient, address: str) -> None:
        await register(client, address, BROKER_A, "broker-a", "TopicTest")
        connection = await client.connection(address)

        def cpp_request(topic: str) -> RemotingCommand:  # what C++ 1.2.3 sends: CPP, version 63, ACL fields
            ext = {"topic": topic, "AccessKey": "", "OnsChannel": "ALIYUN", "Signature": "x0dGk1yC0bKvRzLDQnK7aNPuHeU="}
            return RemotingCommand(
                code=105,
                language=LanguageCode.CPP,
                version=63,
                opaque=connection.next_opaque(),
                remark="",
                ext_fields=ext,
            )

        found = await connection.request(cpp_request("TopicTest"), 3.0)
        assert (found.code, found.body) == (ResponseCode.SUCCESS, ROUTE_JSON)
        missing = await connection.request(cpp_request("NoSuchTopic"), 3.0)
        assert (missing.code, missing.remark, missing.body) == (
            ResponseCode.TOPIC_NOT_EXIST,
            "No topic route info in name server for the topic: NoSuchTopic",
            b"",
        )

    run(body)


def test_slave_registration_answers_master_and_ha_addresses_as_strings() -> None:
    async def body(namesrv: NameServer, client: RemotingClient, address: str) -> None:
        await register(client, address, BROKER_A, "broker-a", "T")
        slave = await register(client, address, "127.0.0.1:10921", "broker-a", "T", broker_id=1)

        assert slave.code == ResponseCode.SUCCESS
        assert slave.ext_fields == {"haServerAddr": "127.0.0.1:11911", "masterAddr": BROKER_A}
        route = TopicRouteData.decode((await route_of(client, address, "T")).body)
        assert route.broker_datas[0].broker_addrs == {0: BROKER_A, 1: "127.0.0.1:10921"}

    run(body)


def test_closing_the_broker_connection_evicts_its_routes_at_once() -> None:
    async def body(namesrv: NameServer, client: RemotingClient, address: str) -> None:
        broker = RemotingClient()
        try:
            await register(broker, address, BROKER_A, "broker-a", "TopicTest")
            await register(client, address, BROKER_B, "broker-b", "Other")  # a different connection: stays
            assert (await route_of(client, address, "TopicTest")).code == ResponseCode.SUCCESS
        finally:
            await broker.close()

        assert await wait_until_gone(client, address, "TopicTest", within_s=1.0) < 1.0
        assert namesrv.routes.live_broker_addrs == (BROKER_B,)
        assert (await route_of(client, address, "Other")).code == ResponseCode.SUCCESS

    run(body)  # the scan (10 s) and expiry (120 s) cannot be what evicted it


def test_a_silent_broker_is_evicted_by_the_scan_and_its_connection_closed() -> None:
    async def body(namesrv: NameServer, client: RemotingClient, address: str) -> None:
        silent, chatty = RemotingClient(), RemotingClient()

        async def keep_registering() -> None:
            while True:
                await register(chatty, address, BROKER_B, "broker-b", "Chatty")
                await asyncio.sleep(0.05)

        heartbeat = asyncio.create_task(keep_registering())
        try:
            await register(silent, address, BROKER_A, "broker-a", "Silent")
            silent_connection = await silent.connection(address)
            assert (await route_of(client, address, "Silent")).code == ResponseCode.SUCCESS

            took = await wait_until_gone(client, address, "Silent", within_s=3.0)

            assert took >= 0.2  # not before the 0.3 s expiry (less the first poll's latency)
            await asyncio.wait_for(silent_connection.wait_closed(), 1.0)  # the server closed it, as Java does
            assert (await route_of(client, address, "Chatty")).code == ResponseCode.SUCCESS
        finally:
            heartbeat.cancel()
            await asyncio.gather(heartbeat, return_exceptions=True)
            await silent.close()
            await chatty.close()

    run(body, scan_interval_s=0.05, broker_expired_s=0.3)


def test_cluster_info_topic_list_delete_topic_and_unregister() -> None:
    async def body(namesrv: NameServer, client: RemotingClient, address: str) -> None:
        await register(client, address, BROKER_A, "broker-a", "T1", "T2")
        await register(client, address, BROKER_B, "broker-b", "T2", cluster="OtherCluster")

        cluster = await client.invoke(address, RequestCode.GET_BROKER_CLUSTER_INFO)
        assert cluster.code == ResponseCode.SUCCESS
        assert json.loads(cluster.body) == {
            "brokerAddrTable": {
                "broker-a": {"brokerAddrs": {"0": BROKER_A}, "brokerName": "broker-a", "cluster": CLUSTER},
                "broker-b": {"brokerAddrs": {"0": BROKER_B}, "brokerName": "broker-b", "cluster": "OtherCluster"},
            },
            "clusterAddrTable": {CLUSTER: ["broker-a"], "OtherCluster": ["broker-b"]},
        }
        assert ClusterInfo.decode(cluster.body).cluster_addr_table[CLUSTER] == ("broker-a",)

        topics = await client.invoke(address, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        assert (topics.code, topics.body) == (ResponseCode.SUCCESS, b'{"topicList":["T1","T2"]}')

        deleted = await client.invoke(address, RequestCode.DELETE_TOPIC_IN_NAMESRV, {"topic": "T1"})
        assert deleted.code == ResponseCode.SUCCESS
        assert (await route_of(client, address, "T1")).code == ResponseCode.TOPIC_NOT_EXIST
        topics = await client.invoke(address, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        assert TopicList.decode(topics.body).topic_list == ("T2",)

        header = UnRegisterBrokerRequestHeader("broker-a", BROKER_A, CLUSTER, 0)
        unregistered = await client.invoke(address, RequestCode.UNREGISTER_BROKER, header.to_fields())
        assert unregistered.code == ResponseCode.SUCCESS
        route = TopicRouteData.decode((await route_of(client, address, "T2")).body)
        assert [b.broker_name for b in route.broker_datas] == ["broker-b"]
        assert "broker-a" not in ClusterInfo.decode((await client.invoke(address, 106)).body).broker_addr_table

    run(body)


def test_compressed_and_old_bodies_bad_crc_bad_header_and_unsupported_code() -> None:
    async def body(namesrv: NameServer, client: RemotingClient, address: str) -> None:
        wrapper = TopicConfigSerializeWrapper({"Z": TopicConfig("Z", 2, 2)}, DataVersion(1, 1))
        zipped = RegisterBrokerBody(wrapper).encode(compressed=True)
        header = RegisterBrokerRequestHeader(
            "broker-a", BROKER_A, CLUSTER, "127.0.0.1:10912", 0, compressed=True, body_crc32=body_crc32(zipped)
        )
        ok = await client.invoke(address, RequestCode.REGISTER_BROKER, header.to_fields(), zipped)
        assert ok.code == ResponseCode.SUCCESS
        assert TopicRouteData.decode((await route_of(client, address, "Z")).body).queue_datas[0].write_queue_nums == 2

        bad_crc = dict(header.to_fields(), bodyCrc32=str(body_crc32(zipped) ^ 1))
        refused = await client.invoke(address, RequestCode.REGISTER_BROKER, bad_crc, zipped)
        assert (refused.code, refused.remark) == (ResponseCode.SYSTEM_ERROR, "crc32 not match")

        no_topic = await client.invoke(address, RequestCode.GET_ROUTEINFO_BY_TOPIC, {})
        assert no_topic.code == ResponseCode.SYSTEM_ERROR and "topic" in (no_topic.remark or "")
        garbage = await client.invoke(address, RequestCode.REGISTER_BROKER, header.to_fields(), b"not zlib")
        assert garbage.code == ResponseCode.SYSTEM_ERROR

        # Before V3_0_11 (37) the body is a bare TopicConfigSerializeWrapper.
        old_wrapper = TopicConfigSerializeWrapper({"Old": TopicConfig("Old", 3, 3)}, DataVersion(1, 1))
        old_header = RegisterBrokerRequestHeader("broker-o", "127.0.0.1:10941", CLUSTER, "127.0.0.1:10942", 0)
        connection = await client.connection(address)
        old = RemotingCommand(
            code=RequestCode.REGISTER_BROKER,
            version=36,
            opaque=connection.next_opaque(),
            ext_fields=old_header.to_fields(),
            body=old_wrapper.encode(),
        )
        assert (await connection.request(old, 3.0)).code == ResponseCode.SUCCESS
        assert TopicRouteData.decode((await route_of(client, address, "Old")).body).queue_datas[0].read_queue_nums == 3

        kv = await client.invoke(address, RequestCode.PUT_KV_CONFIG, {"namespace": "n", "key": "k", "value": "v"})
        assert kv.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED
        # The connection survived every refusal.
        assert (await route_of(client, address, "Z")).code == ResponseCode.SUCCESS

    run(body)


def test_close_is_idempotent_and_port_needs_start() -> None:
    async def main() -> None:
        namesrv = NameServer(NamesrvConfig("127.0.0.1", 0))
        with pytest.raises(RuntimeError):
            namesrv.port  # noqa: B018 - reading the property is the check
        await namesrv.start()
        assert namesrv.port > 0
        await namesrv.close()
        await namesrv.close()

    asyncio.run(main())


def test_a_registration_whose_body_holds_a_lone_surrogate_is_answered_and_not_stored() -> None:
    async def body(namesrv: NameServer, client: RemotingClient, address: str) -> None:
        raw = register_body(1, "PLACEHOLDER").replace(b"PLACEHOLDER", b"\\ud800")
        header = RegisterBrokerRequestHeader("broker-a", BROKER_A, CLUSTER, BROKER_A, 0, body_crc32=body_crc32(raw))
        response = await client.invoke(address, RequestCode.REGISTER_BROKER, header.to_fields(), raw)
        assert response.code == ResponseCode.SYSTEM_ERROR and "holds a lone surrogate" in (response.remark or "")
        assert namesrv.routes.all_topics() == () and namesrv.routes.live_broker_addrs == ()
        topics = await client.invoke(address, RequestCode.GET_ALL_TOPIC_LIST_FROM_NAMESERVER)
        assert topics.code == ResponseCode.SUCCESS

    run(body)
