"""``sparkmq proxy`` (proxyMode=CLUSTER) in front of two broker groups, with the real RocketMQ 5 Python client.

One NameServer, brokers ``proxy-a`` and ``proxy-b`` (SYNC flush) and one proxy per module; the topic
has two queues on each broker. The last test kills ``proxy-b`` with SIGKILL: the proxy keeps
serving through ``proxy-a``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from sparkmq.protocol.codes import RequestCode, ResponseCode
from support.grpc_broker import GrpcBroker, start_broker
from support.processes import NamesrvProcess, ServiceProcess, wait_until
from support.rocketmq5 import finished, of, require_rmq5_python, run5

TOPIC, GROUP = "ProxyTopic", "ProxyGroup"


@dataclass
class Cluster:
    namesrv: NamesrvProcess
    brokers: dict[str, GrpcBroker]
    proxy: ServiceProcess

    @property
    def endpoint(self) -> str:
        return self.proxy.ready_line.rsplit(" ", 1)[-1]

    def stored(self, name: str) -> int:
        return sum(max(0, self.brokers[name].max_offset(TOPIC, q)) for q in (0, 1))

    def committed(self, name: str) -> int:
        return sum(max(0, self.brokers[name].committed(GROUP, TOPIC, q)) for q in (0, 1))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    require_rmq5_python()
    namesrv = NamesrvProcess.start()
    brokers: dict[str, GrpcBroker] = {}
    proxy = None
    try:
        for name in ("proxy-a", "proxy-b"):
            store = tmp_path_factory.mktemp(name)
            process = start_broker(store, namesrv.address, 0, "--set", f"brokerName={name}")
            brokers[name] = GrpcBroker(store, namesrv, process)
            brokers[name].create_topic(TOPIC, queues=2)
        assert wait_until(lambda: _route_brokers(brokers["proxy-a"], namesrv.address) == set(brokers), timeout_s=40)
        proxy = ServiceProcess.launch(
            ["proxy", "--namesrv", namesrv.address, "--grpc-port", "0", "--invisible-ms", "2000"],
            "proxy gRPC endpoint listening on",
        )
        yield Cluster(namesrv, brokers, proxy)
    finally:
        if proxy is not None:
            proxy.stop()
        for broker in brokers.values():
            broker.broker.stop()
        namesrv.stop()


def _route_brokers(broker: GrpcBroker, namesrv: str) -> set[str]:
    code, _, _, body = broker.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, address=namesrv, topic=TOPIC)
    if code != ResponseCode.SUCCESS:
        return set()
    return {q["brokerName"] for q in json.loads(body).get("queueDatas", [])}


def client(home: Path, *args: str) -> list[dict[str, object]]:
    return finished(run5(home, *args))


def test_sends_spread_over_the_broker_groups_and_receives_ack_on_each(cluster: Cluster, tmp_path: Path) -> None:
    sent = of(client(tmp_path, "produce", cluster.endpoint, TOPIC, "8"), "sent")
    assert len(sent) == 8
    assert cluster.stored("proxy-a") > 0 and cluster.stored("proxy-b") > 0
    assert cluster.stored("proxy-a") + cluster.stored("proxy-b") == 8
    records = client(tmp_path, "receive", cluster.endpoint, TOPIC, GROUP, "8")
    assert sorted(r["id"] for r in of(records, "received")) == sorted(s["id"] for s in sent)
    assert len(of(records, "acked")) == 8
    # each broker's POP acks reached its consumer offsets
    assert wait_until(lambda: cluster.committed("proxy-a") == cluster.stored("proxy-a"))
    assert wait_until(lambda: cluster.committed("proxy-b") == cluster.stored("proxy-b"))


def test_push_consumer_retry_goes_through_the_owning_broker(cluster: Cluster, tmp_path: Path) -> None:
    sent = of(client(tmp_path, "produce", cluster.endpoint, TOPIC, "4", "--prefix", "push-"), "sent")
    records = client(tmp_path, "push", cluster.endpoint, TOPIC, GROUP, "4", "--fail-first", "1")
    ok = [r for r in of(records, "received") if not r["failed"]]
    assert sorted(r["id"] for r in ok) == sorted(s["id"] for s in sent)
    assert {r["attempt"] for r in ok} == {2}


def test_fifo_attempts_come_from_the_owning_broker_then_the_dlq(cluster: Cluster, tmp_path: Path) -> None:
    topic, group = "ProxyFifoTopic", "ProxyFifoGroup"
    for broker in cluster.brokers.values():
        broker.create_topic(topic, queues=1)
        broker.create_group(group, retry_max_times=1, orderly=True)
    sent = of(client(tmp_path, "produce", cluster.endpoint, topic, "1", "--group-key", "order-p"), "sent")
    receive = ("receive", cluster.endpoint, topic, group, "2", "--invisible", "1", "--no-ack")
    received = of(client(tmp_path, *receive), "received")
    assert [(r["id"], r["attempt"]) for r in received] == [(sent[0]["id"], 1), (sent[0]["id"], 2)]
    dlq = f"%DLQ%{group}"
    assert wait_until(lambda: sum(max(0, b.max_offset(dlq)) for b in cluster.brokers.values()) == 1, timeout_s=15)


def test_bad_input_through_the_proxy_gets_a_status_with_a_reason(cluster: Cluster) -> None:
    with grpc.insecure_channel(cluster.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        handles = ["1 1 30000 0 0 nowhere 0 0", "1 1 30000 0 0 proxy-a 0 999", "not a handle"]
        entries = [spb.AckMessageEntry(message_id=str(i), receipt_handle=h) for i, h in enumerate(handles)]
        ack = stub.AckMessage(
            spb.AckMessageRequest(group=pb.Resource(name=GROUP), topic=pb.Resource(name=TOPIC), entries=entries),
            timeout=10,
        )
        assert [e.status.code for e in ack.entries] == [pb.INVALID_RECEIPT_HANDLE] * 3
        assert "nowhere" in ack.entries[0].status.message
        half = pb.Message(
            topic=pb.Resource(name=TOPIC),
            body=b"x",
            system_properties=pb.SystemProperties(message_id="tx-1", message_type=pb.TRANSACTION),
        )
        sent = stub.SendMessage(spb.SendMessageRequest(messages=[half]), timeout=10)
        assert sent.status.code == pb.NOT_IMPLEMENTED and "proxy" in sent.status.message
        route = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="ProxyNoSuchTopic")), timeout=10)
        assert route.status.code == pb.TOPIC_NOT_FOUND


def test_a_killed_broker_group_leaves_the_others_serving(cluster: Cluster, tmp_path: Path) -> None:
    before = cluster.stored("proxy-a")
    cluster.brokers["proxy-b"].broker.kill()
    sent = of(client(tmp_path, "produce", cluster.endpoint, TOPIC, "4", "--prefix", "after-"), "sent")
    assert len(sent) == 4
    assert cluster.stored("proxy-a") == before + 4
    records = client(tmp_path, "receive", cluster.endpoint, TOPIC, GROUP, "4")
    assert sorted(r["body"] for r in of(records, "received")) == sorted(s["body"] for s in sent)
