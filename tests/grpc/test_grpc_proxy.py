"""``sparkmq proxy`` (proxyMode=CLUSTER) in front of two broker groups, with the real RocketMQ 5 clients.

One NameServer, brokers ``proxy-a`` and ``proxy-b`` (SYNC flush, ``aclEnable``) and two proxies per
module, both signing their remoting requests with an admin account of the brokers: ``proxy`` checks
no ACL, ``acl_proxy`` checks every RPC against the brokers' own accounts file. Each topic has two
queues on each broker. The last test kills ``proxy-b`` with SIGKILL: the proxy keeps serving
through ``proxy-a``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol import service_pb2_grpc

from sparkmq.cli.main import main
from sparkmq.protocol.acl_signing import SessionCredentials
from sparkmq.protocol.codes import RequestCode, ResponseCode
from support.grpc_broker import GrpcBroker, signed_metadata, start_broker, user_account
from support.processes import NamesrvProcess, ServiceProcess, wait_until
from support.rocketmq5 import check_transactions, finished, of, require_rmq5_python, run5
from support.rocketmq5_java import require_java5, run_java5

TOPIC, GROUP = "ProxyTopic", "ProxyGroup"
TX_TOPIC, JAVA_TX_TOPIC, ACL_TOPIC = "ProxyTxTopic", "ProxyJavaTxTopic", "ProxyAclTopic"
PROXY_KEYS = ("proxyAdmin", "proxySecret12")
USER_KEYS = ("--ak", "grpcUser", "--sk", "grpcSecret12")
ACCOUNTS = f"""\
globalWhiteRemoteAddresses: []
accounts:
- accessKey: {PROXY_KEYS[0]}
  secretKey: {PROXY_KEYS[1]}
  admin: true
{user_account(ACL_TOPIC, "ProxyAclPubOnly")}"""


@dataclass
class Cluster:
    namesrv: NamesrvProcess
    brokers: dict[str, GrpcBroker]
    proxy: ServiceProcess
    acl_proxy: ServiceProcess

    @property
    def endpoint(self) -> str:
        return self.proxy.ready_line.rsplit(" ", 1)[-1]

    @property
    def acl_endpoint(self) -> str:
        return self.acl_proxy.ready_line.rsplit(" ", 1)[-1]

    def stored(self, name: str) -> int:
        return sum(max(0, self.brokers[name].max_offset(TOPIC, q)) for q in (0, 1))

    def committed(self, name: str) -> int:
        return sum(max(0, self.brokers[name].committed(GROUP, TOPIC, q)) for q in (0, 1))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    require_rmq5_python()
    accounts = tmp_path_factory.mktemp("proxy-acl") / "plain_acl.yml"
    accounts.write_text(ACCOUNTS, encoding="utf-8")
    acl = ("--set", "aclEnable=true", "--set", f"aclFile={accounts}")
    signer = SessionCredentials(*PROXY_KEYS).sign
    namesrv = NamesrvProcess.start()
    brokers: dict[str, GrpcBroker] = {}
    started: list[Future[ServiceProcess]] = []
    try:
        stores = {name: tmp_path_factory.mktemp(name) for name in ("proxy-a", "proxy-b")}
        with ThreadPoolExecutor(2) as pool:  # processes start side by side: the module's setup is most of its time
            starting = {
                name: pool.submit(start_broker, store, namesrv.address, 0, "--set", f"brokerName={name}", *acl)
                for name, store in stores.items()
            }
        for name, future in starting.items():
            if future.exception() is None:
                brokers[name] = GrpcBroker(stores[name], namesrv, future.result(), signer)
        for future in starting.values():
            future.result()  # a broker that did not start fails the module; the others are stopped below
        for broker in brokers.values():
            broker.create_topic(TOPIC, queues=2)
            broker.create_topic(ACL_TOPIC, queues=2)
            for topic in (TX_TOPIC, JAVA_TX_TOPIC):
                broker.create_topic(topic, queues=2, message_type="TRANSACTION")
        keys = ["--access-key", PROXY_KEYS[0], "--secret-key", PROXY_KEYS[1]]
        command = ["proxy", "--namesrv", namesrv.address, "--grpc-port", "0", "--invisible-ms", "2000", *keys]
        with ThreadPoolExecutor(2) as pool:
            started = [
                pool.submit(ServiceProcess.launch, [*command, *extra], "proxy gRPC endpoint listening on")
                for extra in ([], ["--acl-file", str(accounts)])
            ]
        topics = (TOPIC, ACL_TOPIC, TX_TOPIC, JAVA_TX_TOPIC)
        assert wait_until(
            lambda: all(_route_brokers(brokers["proxy-a"], namesrv.address, t) == set(brokers) for t in topics),
            timeout_s=40,
        )
        yield Cluster(namesrv, brokers, *(proxy.result() for proxy in started))
    finally:
        for proxy in started:
            if proxy.exception() is None:
                proxy.result().stop()
        for broker in brokers.values():
            broker.broker.stop()
        namesrv.stop()


def _route_brokers(broker: GrpcBroker, namesrv: str, topic: str) -> set[str]:
    code, _, _, body = broker.request(RequestCode.GET_ROUTEINFO_BY_TOPIC, address=namesrv, topic=topic)
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
        route = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name="ProxyNoSuchTopic")), timeout=10)
        assert route.status.code == pb.TOPIC_NOT_FOUND
        end = spb.EndTransactionRequest(
            topic=pb.Resource(name=TX_TOPIC), message_id="m", transaction_id="proxy-a 1 x", resolution=pb.COMMIT
        )
        ended = stub.EndTransaction(end, timeout=10).status
        assert ended.code == pb.INVALID_TRANSACTION_ID and "proxy-a 1 x" in ended.message


def test_a_topic_message_type_comes_from_the_brokers(cluster: Cluster) -> None:
    """The proxy routes and refuses by the brokers' ``message.type``, as a broker's own endpoint does."""
    normal = pb.Message(
        topic=pb.Resource(name=TX_TOPIC),
        body=b"x",
        system_properties=pb.SystemProperties(message_id="normal-1", message_type=pb.NORMAL),
    )
    answers = []
    for endpoint in (cluster.endpoint, cluster.brokers["proxy-a"].endpoint):
        with grpc.insecure_channel(endpoint) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            md = signed_metadata("proxyAdmin", "proxySecret12")
            route = stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=TX_TOPIC)), metadata=md, timeout=10)
            sent = stub.SendMessage(spb.SendMessageRequest(messages=[normal]), metadata=md, timeout=10)
        assert {tuple(q.accept_message_types) for q in route.message_queues} == {(pb.TRANSACTION,)}
        answers.append((sent.status.code, sent.status.message))
    assert (
        answers[0]
        == answers[1]
        == (
            pb.MESSAGE_PROPERTY_CONFLICT_WITH_TYPE,
            f"topic {TX_TOPIC!r} accepts ['TRANSACTION'], not NORMAL messages",
        )
    )


def test_python_client_transactions_commit_rollback_and_check_through_the_proxy(
    cluster: Cluster, tmp_path: Path
) -> None:
    producer = run5(tmp_path, "transact", cluster.endpoint, TX_TOPIC)
    check_transactions(producer, lambda: client(tmp_path, "receive", cluster.endpoint, TX_TOPIC, "ProxyTxGroup", "2"))


def test_java_client_transactions_commit_rollback_and_check_through_the_proxy(cluster: Cluster, tmp_path: Path) -> None:
    require_java5()
    producer = run_java5(tmp_path, "Rmq5Transact", cluster.endpoint, JAVA_TX_TOPIC)
    receive = ("receive", cluster.endpoint, JAVA_TX_TOPIC, "ProxyJavaTxGroup", "2")
    check_transactions(producer, lambda: client(tmp_path, *receive))  # the Python client: one JVM less


def test_acl_proxy_serves_an_allowed_client_through_acl_brokers(cluster: Cluster, tmp_path: Path) -> None:
    sent = of(client(tmp_path, "produce", cluster.acl_endpoint, ACL_TOPIC, "4", *USER_KEYS), "sent")
    records = client(tmp_path, "receive", cluster.acl_endpoint, ACL_TOPIC, "ProxyAclGroup", "4", *USER_KEYS)
    assert sorted(r["id"] for r in of(records, "received")) == sorted(s["id"] for s in sent)
    assert len(of(records, "acked")) == 4


def test_acl_proxy_refuses_as_the_brokers_own_endpoint_does(cluster: Cluster) -> None:
    user = signed_metadata("grpcUser", "grpcSecret12")
    route = spb.QueryRouteRequest(topic=pb.Resource(name=ACL_TOPIC))
    message = pb.Message(
        topic=pb.Resource(name=TX_TOPIC), body=b"x", system_properties=pb.SystemProperties(message_id="acl-1")
    )
    receive = spb.ReceiveMessageRequest(
        group=pb.Resource(name="ProxyAclGroup"),
        message_queue=pb.MessageQueue(topic=pb.Resource(name="ProxyAclPubOnly"), id=-1),
        batch_size=1,
    )

    def answers(endpoint: str) -> dict[str, tuple[int, str]]:
        with grpc.insecure_channel(endpoint) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            statuses = {
                "wrong secret": stub.QueryRoute(
                    route, metadata=signed_metadata("grpcUser", "not-the-secret"), timeout=10
                ),
                "unknown account": stub.QueryRoute(route, metadata=signed_metadata("nobody", "x"), timeout=10),
                "no signature": stub.QueryRoute(route, timeout=10),
                "allowed": stub.QueryRoute(route, metadata=user, timeout=10),
                "send to a denied topic": stub.SendMessage(
                    spb.SendMessageRequest(messages=[message]), metadata=user, timeout=10
                ),
                "receive from a PUB-only topic": next(iter(stub.ReceiveMessage(receive, metadata=user, timeout=10))),
            }
        return {case: (answer.status.code, answer.status.message) for case, answer in statuses.items()}

    proxy = answers(cluster.acl_endpoint)
    assert proxy == answers(cluster.brokers["proxy-a"].endpoint)
    assert proxy["wrong secret"] == (pb.UNAUTHORIZED, "Check signature failed for accessKey=grpcUser")
    assert proxy["unknown account"] == (pb.UNAUTHORIZED, "No acl config for nobody")
    assert proxy["no signature"][0] == pb.UNAUTHORIZED
    assert proxy["allowed"][0] == pb.OK
    assert proxy["send to a denied topic"] == (pb.FORBIDDEN, f"No default permission for topic:{TX_TOPIC}")
    assert proxy["receive from a PUB-only topic"] == (pb.FORBIDDEN, "No permission for topic:ProxyAclPubOnly")


def test_refused_proxy_options_exit_2_with_the_reason(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["proxy", "--namesrv", "127.0.0.1:9", "--grpc-port", "0"]
    assert main([*base, "--access-key", "proxyAdmin", "--secret-key", ""]) == 2
    assert "--access-key and --secret-key go together" in capsys.readouterr().err
    (tmp_path / "bad.yml").write_text("accounts: [1, 2", encoding="utf-8")
    assert main([*base, "--acl-file", str(tmp_path / "bad.yml")]) == 2
    assert "bad.yml" in capsys.readouterr().err


def test_a_killed_broker_group_leaves_the_others_serving(cluster: Cluster, tmp_path: Path) -> None:
    before = cluster.stored("proxy-a")
    cluster.brokers["proxy-b"].broker.kill()
    sent = of(client(tmp_path, "produce", cluster.endpoint, TOPIC, "4", "--prefix", "after-"), "sent")
    assert len(sent) == 4
    assert cluster.stored("proxy-a") == before + 4
    records = client(tmp_path, "receive", cluster.endpoint, TOPIC, GROUP, "4")
    assert sorted(r["body"] for r in of(records, "received")) == sorted(s["body"] for s in sent)
