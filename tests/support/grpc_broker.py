"""A sparkmq broker with its gRPC endpoint (enableGrpcServer) in a subprocess, for tests/grpc."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import random
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sparkmq.protocol.codes import RequestCode, ResponseCode
from sparkmq.protocol.ops_bodies import SubscriptionGroupBody
from sparkmq.remoting import RemotingClient
from sparkmq.remoting.client import Signer
from support.processes import BrokerProcess, NamesrvProcess, wait_until

GRPC_LINE = "gRPC endpoint listening on "


def user_account(topic: str, pub_only: str) -> str:
    """The plain_acl account ``grpcUser`` / ``grpcSecret12``: PUB|SUB on ``topic``, PUB on ``pub_only``, no
    other topic, SUB on every group."""
    return f"""\
- accessKey: grpcUser
  secretKey: grpcSecret12
  admin: false
  defaultTopicPerm: DENY
  defaultGroupPerm: SUB
  topicPerms:
  - {topic}=PUB|SUB
  - {pub_only}=PUB
"""


def signed_metadata(access_key: str, secret_key: str, age_s: float = 0) -> list[tuple[str, str]]:
    """A 5.x client's signature headers: an HMAC-SHA1 of ``x-mq-date-time`` (``age_s`` ago) with the secret key."""
    when = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() - age_s))
    signature = hmac.new(secret_key.encode(), when.encode(), hashlib.sha1).hexdigest()
    authorization = f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, Signature={signature}"
    return [("x-mq-date-time", when), ("authorization", authorization), ("x-mq-client-id", "acl-test")]


@dataclass
class GrpcBroker:
    store_dir: Path
    namesrv: NamesrvProcess | None
    broker: BrokerProcess
    signer: Signer | None = None  # signs the admin requests of a broker with aclEnable

    @property
    def endpoint(self) -> str:
        line = next(line for line in self.broker.output if GRPC_LINE in line)
        return line.rsplit(" ", 1)[-1]

    def start(self, grpc_port: int = 0) -> None:
        self.broker = start_broker(self.store_dir, self.namesrv.address if self.namesrv else None, grpc_port)

    def request(
        self, code: int, body: bytes = b"", address: str = "", **ext: object
    ) -> tuple[int, str | None, dict[str, str], bytes]:
        async def call() -> tuple[int, str | None, dict[str, str], bytes]:
            client = RemotingClient(signer=self.signer)
            try:
                fields = {k: str(v) for k, v in ext.items()}
                response = await client.invoke(address or self.broker.address, code, fields, body=body)
            finally:
                await client.close()
            return response.code, response.remark, response.ext_fields, response.body

        return asyncio.run(call())

    def create_topic(self, topic: str, queues: int = 4, message_type: str = "") -> None:
        attributes = {"attributes": f"+message.type={message_type}"} if message_type else {}
        code, remark, _, _ = self.request(
            RequestCode.UPDATE_AND_CREATE_TOPIC,
            topic=topic,
            defaultTopic="TBW102",
            readQueueNums=queues,
            writeQueueNums=queues,
            perm=6,
            topicFilterType="SINGLE_TAG",
            topicSysFlag=0,
            order="false",
            **attributes,
        )
        assert code == ResponseCode.SUCCESS, remark

    def create_group(self, group: str, retry_max_times: int = 16, orderly: bool = False) -> None:
        body = SubscriptionGroupBody(group, retry_max_times=retry_max_times, consume_message_orderly=orderly)
        code, remark, _, _ = self.request(RequestCode.UPDATE_AND_CREATE_SUBSCRIPTIONGROUP, body.encode())
        assert code == ResponseCode.SUCCESS, remark

    def send(self, topic: str, count: int) -> list[dict[str, Any]]:
        """``count`` messages (bodies ``m0``, ``m1``, ...) sent with the published stubs, as a producer run's
        ``sent`` records: for scenarios whose producer is not what they test (a client run costs seconds)."""
        import grpc
        from rocketmq.grpc_protocol import definition_pb2 as pb
        from rocketmq.grpc_protocol import service_pb2 as spb
        from rocketmq.grpc_protocol import service_pb2_grpc

        sent = [{"id": f"{topic}-{uuid.uuid4().hex}", "body": f"m{i}"} for i in range(count)]
        with grpc.insecure_channel(self.endpoint) as channel:
            stub = service_pb2_grpc.MessagingServiceStub(channel)
            for record in sent:
                system = pb.SystemProperties(message_id=record["id"], body_encoding=pb.IDENTITY)
                message = pb.Message(
                    topic=pb.Resource(name=topic), body=record["body"].encode(), system_properties=system
                )
                answer = stub.SendMessage(spb.SendMessageRequest(messages=[message]), timeout=30)
                assert answer.status.code == pb.OK, answer.status
        return sent

    def max_offset(self, topic: str, queue_id: int = 0) -> int:
        code, remark, fields, _ = self.request(RequestCode.GET_MAX_OFFSET, topic=topic, queueId=queue_id)
        return int(fields["offset"]) if code == ResponseCode.SUCCESS else -1

    def assert_received_and_acked(
        self, group: str, topic: str, sent: list[dict[str, Any]], records: list[dict[str, Any]], tag: str
    ) -> None:
        """A receive run's records: each sent message once, first attempt, acked; and the POP group's
        consumer offsets (what consumerProgress shows) at the end of the topic's two queues."""
        received = [r for r in records if r["event"] == "received"]
        assert sorted((r["id"], r["body"]) for r in received) == sorted((s["id"], s["body"]) for s in sent)
        assert {r["attempt"] for r in received} == {1} and {r["tag"] for r in received} == {tag}
        assert len([r for r in records if r["event"] == "acked"]) == len(sent)
        assert wait_until(lambda: sum(self.committed(group, topic, q) for q in (0, 1)) == len(sent))

    def committed(self, group: str, topic: str, queue_id: int) -> int:
        code, _, fields, _ = self.request(
            RequestCode.QUERY_CONSUMER_OFFSET, consumerGroup=group, topic=topic, queueId=queue_id
        )
        return int(fields["offset"]) if code == ResponseCode.SUCCESS else -1


def listen_port() -> int:
    """A free port below the kernel's ephemeral range: a broker restarted on it after kill -9 cannot find it
    taken by some connection's local end, as a port the kernel handed out could be."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    for _ in range(200):
        port = random.randrange(10000, max(10001, low))
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in [10000, {low})")


def start_broker(store_dir: Path, namesrv: str | None, grpc_port: int = 0, *extra: str) -> BrokerProcess:
    grpc_port = grpc_port or listen_port()
    return BrokerProcess.start(
        store_dir,
        namesrv,
        "--flush",
        "sync",
        "--set",
        "enableGrpcServer=true",
        "--set",
        f"grpcServerPort={grpc_port}",
        "--set",  # a push consumer's messages: auto-renewed 2 s at a time
        "defaultInvisibleTimeMills=2000",
        "--set",  # half messages are checked a second after they are sent, every second
        "transactionTimeOut=1000",
        "--set",
        "transactionCheckInterval=1000",
        *extra,
    )
