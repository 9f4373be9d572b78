"""sparkmq's own clients sign every request (ACL 1.0) and get through a broker with ``aclEnable=true``.

One NameServer and one ACL broker process per module; the producer, the push and pull consumers
and Admin run with ``security=ClientSecurity.of(access_key, secret_key)``; wrong credentials are
refused with NO_PERMISSION and RocketMQ's remark.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator

import pytest

from sparkmq import (
    Admin,
    ClientSecurity,
    Message,
    ReceivedMessage,
    RemoteError,
    SendStatus,
)
from sparkmq.client.consume_service import ConsumeResult
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.admin_headers import CreateTopicRequestHeader
from sparkmq.protocol.bodies import MessageQueue
from sparkmq.protocol.heartbeat import ConsumeFromWhere
from sparkmq.remoting import RemotingClient
from support.client_harness import Clients, read_queue, wait_for_route
from support.processes import BrokerProcess, NamesrvProcess

ACCOUNTS = """\
accounts:
  - accessKey: appUser01
    secretKey: appSecret01
    defaultTopicPerm: PUB|SUB
    defaultGroupPerm: SUB
    groupPerms:
      - deniedGroup=DENY
  - accessKey: adminUser
    secretKey: adminSecret
    admin: true
"""
APP = ClientSecurity.of("appUser01", "appSecret01")
ADMIN = ClientSecurity.of("adminUser", "adminSecret")


@pytest.fixture(scope="module")
def acl_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(NameServer address, broker address) of a broker with aclEnable=true."""
    root = tmp_path_factory.mktemp("acl-clients")
    (root / "plain_acl.yml").write_text(ACCOUNTS)
    with (
        NamesrvProcess.start() as namesrv,
        BrokerProcess.start(
            root / "store",
            namesrv.address,
            "--set",
            "aclEnable=true",
            "--set",
            f"aclFile={root / 'plain_acl.yml'}",
            "--set",
            "messageDelayLevel=" + " ".join(["1s"] * 18),
        ) as broker,
    ):
        yield namesrv.address, broker.address


def create_topic(broker: str, namesrv: str, security: ClientSecurity = ADMIN) -> tuple[int, str | None]:
    topic = f"T_{uuid.uuid4().hex[:10]}"
    header = CreateTopicRequestHeader(topic, "TBW102", 2, 2, 6, "SINGLE_TAG", False).to_fields()

    async def call() -> tuple[int, str | None]:
        client = RemotingClient(signer=security.signer())
        try:
            response = await client.invoke(broker, RequestCode.UPDATE_AND_CREATE_TOPIC, header, timeout=5.0)
        finally:
            await client.close()
        return response.code, response.remark

    code, remark = asyncio.run(call())
    if code == ResponseCode.SUCCESS:
        wait_for_route(namesrv, topic, {"broker-a"})
        return code, topic
    return code, remark


@pytest.fixture
def clients() -> Iterator[Clients]:
    opened = Clients()
    try:
        yield opened
    finally:
        opened.close_all()


def test_topic_creation_needs_the_admin_account(acl_cluster: tuple[str, str]) -> None:
    namesrv, broker = acl_cluster
    code, remark = create_topic(broker, namesrv, APP)
    assert code == ResponseCode.NO_PERMISSION
    assert remark == "Need admin permission for request code=17, but accessKey=appUser01 is not"
    assert create_topic(broker, namesrv, ADMIN)[0] == ResponseCode.SUCCESS


def test_signed_producer_push_and_pull_consumers_round_trip(acl_cluster: tuple[str, str], clients: Clients) -> None:
    namesrv, broker = acl_cluster
    _, topic = create_topic(broker, namesrv)
    producer = clients.producer("PID_acl", namesrv, security=APP)
    sent = [producer.send(Message(topic, f"m{i}".encode())) for i in range(6)]
    assert all(r.status is SendStatus.SEND_OK for r in sent)
    expected = {f"m{i}".encode() for i in range(6)}

    received: set[bytes] = set()
    all_in = threading.Event()

    def listen(message: ReceivedMessage) -> ConsumeResult:
        received.add(message.body)
        if received == expected:
            all_in.set()
        return ConsumeResult.SUCCESS

    group = f"CID_{uuid.uuid4().hex[:8]}"
    push = clients.push(
        group, namesrv, topic, listen, security=APP, consume_from_where=ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET
    )
    assert all_in.wait(30), received  # heartbeat, pulls and offset commits all passed the ACL

    pull = clients.pull(f"CID_{uuid.uuid4().hex[:8]}", namesrv, security=APP)
    pulled = [m.body for queue_id in range(2) for m in read_queue(pull, MessageQueue(topic, "broker-a", queue_id))]
    assert sorted(pulled) == sorted(expected)

    clients.close(push)  # commits the consumed offsets
    with Admin(namesrv, security=APP) as admin:
        lags = admin.consumer_lag(group, topic)
    assert sum(lag.broker_offset for lag in lags) == 6
    assert sum(lag.consumer_offset for lag in lags) == 6  # UPDATE_CONSUMER_OFFSET was signed and allowed


def test_wrong_secret_is_refused_with_the_failed_check(acl_cluster: tuple[str, str], clients: Clients) -> None:
    namesrv, broker = acl_cluster
    _, topic = create_topic(broker, namesrv)
    wrong = ClientSecurity.of("appUser01", "not-the-secret")
    producer = clients.producer("PID_acl_wrong", namesrv, security=wrong, retry_times_when_send_failed=0)
    with pytest.raises(RemoteError) as caught:
        producer.send(Message(topic, b"x"))
    assert caught.value.code == ResponseCode.NO_PERMISSION
    assert "Check signature failed for accessKey=appUser01" in caught.value.remark
    unsigned = clients.producer("PID_acl_unsigned", namesrv, retry_times_when_send_failed=0)
    with pytest.raises(RemoteError, match="No accessKey is configured"):
        unsigned.send(Message(topic, b"x"))


def test_sparkmq_admin_signs_with_the_given_credentials(
    acl_cluster: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    from sparkmq.cli.main import main

    namesrv, broker = acl_cluster
    topic = f"T_{uuid.uuid4().hex[:10]}"
    create = ["updateTopic", "-n", namesrv, "-b", broker, "-t", topic]

    assert main(["admin", "--access-key", "appUser01", "--secret-key", "appSecret01", *create]) == 1
    assert "Need admin permission for request code=17" in capsys.readouterr().err  # not an admin account
    assert main(["admin", *create]) == 1
    assert "No accessKey is configured" in capsys.readouterr().err  # unsigned: the broker says so

    assert main(["admin", "--access-key", "adminUser", "--secret-key", "adminSecret", *create]) == 0
    assert f"create topic to {broker} success." in capsys.readouterr().out
