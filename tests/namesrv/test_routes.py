"""RouteInfoManager on its own: registration, routes, eviction by an injected clock, deletion."""

from __future__ import annotations

import doctest
import json
from types import ModuleType

import pytest

import sparkmq.cli.namesrv_command
import sparkmq.namesrv
import sparkmq.namesrv.config
import sparkmq.namesrv.processors
import sparkmq.namesrv.routes
import sparkmq.namesrv.server
from sparkmq.namesrv import RegisterBrokerResult, RouteInfoManager
from sparkmq.protocol.bodies import BrokerData, QueueData
from sparkmq.protocol.namesrv_bodies import DataVersion, TopicConfig, TopicConfigSerializeWrapper

CLUSTER = "DefaultCluster"
A_MASTER, A_SLAVE, B_MASTER = "127.0.0.1:10911", "127.0.0.1:10921", "127.0.0.1:10931"


class Clock:
    """A settable millisecond clock."""

    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


class Channel:
    """A stand-in connection: the manager only compares channels by identity."""


def wrapper(counter: int, *configs: TopicConfig) -> TopicConfigSerializeWrapper:
    return TopicConfigSerializeWrapper({c.topic_name: c for c in configs}, DataVersion(1_700_000_000_000, counter))


def register(
    routes: RouteInfoManager[Channel],
    addr: str,
    name: str,
    broker_id: int,
    topics: TopicConfigSerializeWrapper | None,
    channel: Channel | None = None,
    cluster: str = CLUSTER,
) -> RegisterBrokerResult:
    ha = addr.replace("109", "119")
    return routes.register_broker(cluster, addr, name, broker_id, ha, topics, channel)


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def routes(clock: Clock) -> RouteInfoManager[Channel]:
    return RouteInfoManager(clock=clock)


def test_master_registration_gives_the_route_clients_need(routes: RouteInfoManager[Channel]) -> None:
    topics = wrapper(1, TopicConfig("TopicTest", 4, 4), TopicConfig("T2", 2, 8, 4))
    result = register(routes, A_MASTER, "broker-a", 0, topics)

    assert result == RegisterBrokerResult(None, None)
    route = routes.topic_route("TopicTest")
    assert route is not None
    assert route.queue_datas == (QueueData("broker-a", 4, 4, 6, 0),)
    assert route.broker_datas == (BrokerData(CLUSTER, "broker-a", {0: A_MASTER}),)
    assert json.loads(route.encode()) == {
        "brokerDatas": [{"brokerAddrs": {"0": A_MASTER}, "brokerName": "broker-a", "cluster": CLUSTER}],
        "filterServerTable": {},
        "queueDatas": [
            {"brokerName": "broker-a", "perm": 6, "readQueueNums": 4, "topicSysFlag": 0, "writeQueueNums": 4}
        ],
    }
    t2 = routes.topic_route("T2")
    assert t2 is not None and t2.queue_datas == (QueueData("broker-a", 2, 8, 4, 0),)
    assert routes.topic_route("unknown") is None
    assert routes.all_topics() == ("T2", "TopicTest")


def test_reregistration_rereads_topics_only_when_the_data_version_changes(routes: RouteInfoManager[Channel]) -> None:
    register(routes, A_MASTER, "broker-a", 0, wrapper(1, TopicConfig("T", 4, 4)))
    register(routes, A_MASTER, "broker-a", 0, wrapper(1, TopicConfig("T", 8, 8), TopicConfig("New", 1, 1)))
    route = routes.topic_route("T")
    assert route is not None and route.queue_datas[0].write_queue_nums == 4  # same version: not re-read
    assert routes.topic_route("New") is None

    register(routes, A_MASTER, "broker-a", 0, wrapper(2, TopicConfig("T", 8, 8, 2), TopicConfig("New", 1, 1)))
    route = routes.topic_route("T")
    assert route is not None and route.queue_datas == (QueueData("broker-a", 8, 8, 2, 0),)
    assert routes.topic_route("New") is not None

    # An incremental registration carries one topic: the others stay (Java 4.9.7 semantics).
    register(routes, A_MASTER, "broker-a", 0, wrapper(3, TopicConfig("Only", 4, 4)))
    assert routes.all_topics() == ("New", "Only", "T")


def test_two_brokers_serve_one_topic_sorted_by_name(routes: RouteInfoManager[Channel]) -> None:
    register(routes, B_MASTER, "broker-b", 0, wrapper(1, TopicConfig("T", 2, 2)))
    register(routes, A_MASTER, "broker-a", 0, wrapper(1, TopicConfig("T", 4, 4)))

    route = routes.topic_route("T")
    assert route is not None
    assert [q.broker_name for q in route.queue_datas] == ["broker-a", "broker-b"]
    assert [b.master_addr for b in route.broker_datas] == [A_MASTER, B_MASTER]


def test_slave_learns_its_master_and_its_topics_are_ignored(routes: RouteInfoManager[Channel]) -> None:
    result = register(routes, A_SLAVE, "broker-a", 1, wrapper(1, TopicConfig("SlaveOnly", 4, 4)))
    assert result == RegisterBrokerResult()
    assert routes.topic_route("SlaveOnly") is None

    register(routes, A_MASTER, "broker-a", 0, wrapper(1, TopicConfig("T", 4, 4)))
    result = register(routes, A_SLAVE, "broker-a", 1, wrapper(1, TopicConfig("T", 4, 4)))

    assert result == RegisterBrokerResult(ha_server_addr="127.0.0.1:11911", master_addr=A_MASTER)
    route = routes.topic_route("T")
    assert route is not None and route.broker_datas[0].broker_addrs == {0: A_MASTER, 1: A_SLAVE}


def test_same_address_under_a_new_id_replaces_the_old_id(routes: RouteInfoManager[Channel]) -> None:
    register(routes, A_SLAVE, "broker-a", 1, None)
    register(routes, A_SLAVE, "broker-a", 0, wrapper(1, TopicConfig("T", 4, 4)))  # slave promoted

    route = routes.topic_route("T")
    assert route is not None and route.broker_datas[0].broker_addrs == {0: A_SLAVE}


def test_unregister_removes_the_id_then_the_broker_and_its_topics(routes: RouteInfoManager[Channel]) -> None:
    register(routes, A_MASTER, "broker-a", 0, wrapper(1, TopicConfig("T", 4, 4)))
    register(routes, A_SLAVE, "broker-a", 1, None)

    routes.unregister_broker(CLUSTER, A_SLAVE, "broker-a", 1)
    route = routes.topic_route("T")
    assert route is not None and route.broker_datas[0].broker_addrs == {0: A_MASTER}
    assert routes.live_broker_addrs == (A_MASTER,)

    routes.unregister_broker(CLUSTER, A_MASTER, "broker-a", 0)
    assert routes.topic_route("T") is None
    assert routes.all_topics() == ()
    assert routes.cluster_info().cluster_addr_table == {}
    routes.unregister_broker(CLUSTER, A_MASTER, "broker-a", 0)  # unknown: no error


def test_silent_brokers_are_evicted_after_the_expiry(clock: Clock) -> None:
    routes: RouteInfoManager[Channel] = RouteInfoManager(broker_channel_expired_ms=120_000, clock=clock)
    channel_a, channel_b = Channel(), Channel()
    register(routes, A_MASTER, "broker-a", 0, wrapper(1, TopicConfig("T", 4, 4)), channel_a)
    register(routes, B_MASTER, "broker-b", 0, wrapper(1, TopicConfig("T", 2, 2)), channel_b)

    clock.now += 60_000
    register(routes, B_MASTER, "broker-b", 0, wrapper(1, TopicConfig("T", 2, 2)), channel_b)  # B keeps registering
    clock.now += 60_000
    assert routes.evict_stale() == []  # A silent exactly 120 s: not yet (Java evicts when last + 120 s < now)

    clock.now += 1
    evicted = routes.evict_stale()
    assert [(addr, info.channel) for addr, info in evicted] == [(A_MASTER, channel_a)]
    route = routes.topic_route("T")
    assert route is not None and [q.broker_name for q in route.queue_datas] == ["broker-b"]
    assert routes.live_broker(A_MASTER) is None and routes.live_broker(B_MASTER) is not None

    clock.now += 60_001
    assert [addr for addr, _ in routes.evict_stale()] == [B_MASTER]
    assert routes.topic_route("T") is None and routes.cluster_info().broker_addr_table == {}


def test_a_closed_channel_evicts_its_brokers_at_once(routes: RouteInfoManager[Channel]) -> None:
    channel_a, channel_b = Channel(), Channel()
    register(routes, A_MASTER, "broker-a", 0, wrapper(1, TopicConfig("T", 4, 4)), channel_a)
    register(routes, A_SLAVE, "broker-a", 1, None, channel_a)
    register(routes, B_MASTER, "broker-b", 0, wrapper(1, TopicConfig("B", 4, 4)), channel_b)

    assert routes.channel_closed(Channel()) == []
    assert sorted(routes.channel_closed(channel_a)) == [A_MASTER, A_SLAVE]
    assert routes.topic_route("T") is None
    assert routes.topic_route("B") is not None
    assert routes.cluster_info().cluster_addr_table == {CLUSTER: ("broker-b",)}


def test_master_gone_but_slave_alive_keeps_the_route_without_key_0(routes: RouteInfoManager[Channel]) -> None:
    master, slave = Channel(), Channel()
    register(routes, A_MASTER, "broker-a", 0, wrapper(1, TopicConfig("T", 4, 4)), master)
    register(routes, A_SLAVE, "broker-a", 1, None, slave)

    routes.channel_closed(master)

    route = routes.topic_route("T")
    assert route is not None and route.broker_datas[0].broker_addrs == {1: A_SLAVE}


def test_cluster_info_lists_brokers_and_clusters(routes: RouteInfoManager[Channel]) -> None:
    register(routes, A_MASTER, "broker-a", 0, None)
    register(routes, A_SLAVE, "broker-a", 1, None)
    register(routes, B_MASTER, "broker-b", 0, None, cluster="OtherCluster")

    info = routes.cluster_info()
    assert info.broker_addr_table == {
        "broker-a": BrokerData(CLUSTER, "broker-a", {0: A_MASTER, 1: A_SLAVE}),
        "broker-b": BrokerData("OtherCluster", "broker-b", {0: B_MASTER}),
    }
    assert info.cluster_addr_table == {CLUSTER: ("broker-a",), "OtherCluster": ("broker-b",)}
    assert json.loads(info.encode())["brokerAddrTable"]["broker-a"]["brokerAddrs"] == {"0": A_MASTER, "1": A_SLAVE}


def test_delete_topic_everywhere_or_in_one_cluster(routes: RouteInfoManager[Channel]) -> None:
    register(routes, A_MASTER, "broker-a", 0, wrapper(1, TopicConfig("T", 4, 4), TopicConfig("U", 4, 4)))
    register(routes, B_MASTER, "broker-b", 0, wrapper(1, TopicConfig("T", 4, 4)), cluster="OtherCluster")

    assert routes.delete_topic("T", "OtherCluster")
    route = routes.topic_route("T")
    assert route is not None and [q.broker_name for q in route.queue_datas] == ["broker-a"]

    assert routes.delete_topic("T")
    assert routes.topic_route("T") is None
    assert not routes.delete_topic("T")
    assert routes.all_topics() == ("U",)
    # Deleted from the NameServer only: the broker's next registration with a new version brings it back.
    register(routes, A_MASTER, "broker-a", 0, wrapper(2, TopicConfig("T", 4, 4)))
    assert routes.topic_route("T") is not None


@pytest.mark.parametrize(
    "module",
    [
        sparkmq.namesrv,
        sparkmq.namesrv.routes,
        sparkmq.namesrv.config,
        sparkmq.namesrv.processors,
        sparkmq.namesrv.server,
        sparkmq.cli.namesrv_command,
    ],
    ids=lambda module: module.__name__,
)
def test_docstring_examples(module: ModuleType) -> None:
    results = doctest.testmod(module, optionflags=doctest.ELLIPSIS)

    assert results.attempted > 0 and results.failed == 0
