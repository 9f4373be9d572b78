"""ACL on the gRPC endpoint: the 5.x client's signature (``authorization`` over ``x-mq-date-time``) and
the account's topic and group permissions, against one broker with ``aclEnable``."""

from __future__ import annotations

import hashlib
import hmac
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

try:
    import grpc
    from rocketmq.grpc_protocol import definition_pb2 as pb
    from rocketmq.grpc_protocol import service_pb2 as spb
    from rocketmq.grpc_protocol import service_pb2_grpc
except ImportError as exc:  # loud: these tests need what the broker's endpoint needs
    raise ImportError(f"{exc}: tests/grpc need the `grpc` extra in .venv (`make venv` installs it)") from exc

from support.grpc_broker import GrpcBroker, start_broker
from support.rocketmq5 import require_rmq5_python, run5

ACL = """\
globalWhiteRemoteAddresses: []
accounts:
- accessKey: grpcUser
  secretKey: grpcSecret12
  admin: false
  defaultTopicPerm: DENY
  defaultGroupPerm: SUB
  topicPerms:
  - GrpcAclTopic=PUB|SUB
  - GrpcAclPubOnly=PUB
"""


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[GrpcBroker]:
    require_rmq5_python()
    root = tmp_path_factory.mktemp("grpc-acl")
    (root / "plain_acl.yml").write_text(ACL, encoding="utf-8")
    acl = ("--set", "aclEnable=true", "--set", f"aclFile={root / 'plain_acl.yml'}")
    cluster = GrpcBroker(root / "store", None, start_broker(root / "store", None, 0, *acl))
    try:
        yield cluster
    finally:
        cluster.broker.stop()


def metadata(access_key: str, secret_key: str, age_s: float = 0) -> list[tuple[str, str]]:
    when = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() - age_s))
    signature = hmac.new(secret_key.encode(), when.encode(), hashlib.sha1).hexdigest()
    authorization = f"MQv2-HMAC-SHA1 Credential={access_key}, SignedHeaders=x-mq-date-time, Signature={signature}"
    return [("x-mq-date-time", when), ("authorization", authorization), ("x-mq-client-id", "acl-test")]


def route(broker: GrpcBroker, topic: str, md: list[tuple[str, str]]) -> pb.Status:
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        return stub.QueryRoute(spb.QueryRouteRequest(topic=pb.Resource(name=topic)), metadata=md, timeout=10).status


def test_the_5x_client_with_its_credentials_produces_and_consumes(broker: GrpcBroker, tmp_path: Path) -> None:
    keys = ("--ak", "grpcUser", "--sk", "grpcSecret12")
    run = run5(tmp_path, "produce", broker.endpoint, "GrpcAclTopic", "2", *keys)
    try:
        sent = [r for r in run.finish(60) if r["event"] == "sent"]
    finally:
        run.kill()
    run = run5(tmp_path, "receive", broker.endpoint, "GrpcAclTopic", "GrpcAclGroup", "2", *keys)
    try:
        received = [r for r in run.finish(60) if r["event"] == "received"]
    finally:
        run.kill()
    assert sorted(r["id"] for r in received) == sorted(r["id"] for r in sent)


def test_bad_signatures_and_missing_permissions_are_refused(broker: GrpcBroker) -> None:
    assert route(broker, "GrpcAclTopic", metadata("grpcUser", "grpcSecret12")).code == pb.OK
    wrong = route(broker, "GrpcAclTopic", metadata("grpcUser", "not-the-secret"))
    assert (wrong.code, wrong.message) == (pb.UNAUTHORIZED, "Check signature failed for accessKey=grpcUser")
    unknown = route(broker, "GrpcAclTopic", metadata("nobody", "x"))
    assert (unknown.code, unknown.message) == (pb.UNAUTHORIZED, "No acl config for nobody")
    assert route(broker, "GrpcAclTopic", []).code == pb.UNAUTHORIZED
    assert route(broker, "GrpcAclTopic", metadata("grpcUser", "grpcSecret12", age_s=60)).code == pb.OK
    stale = route(broker, "GrpcAclTopic", metadata("grpcUser", "grpcSecret12", age_s=3600))
    assert stale.code == pb.UNAUTHORIZED and "away from the broker's clock" in stale.message
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = service_pb2_grpc.MessagingServiceStub(channel)
        request = spb.ReceiveMessageRequest(
            group=pb.Resource(name="GrpcAclGroup"),
            message_queue=pb.MessageQueue(topic=pb.Resource(name="GrpcAclPubOnly"), id=-1),
            batch_size=1,
        )
        md = metadata("grpcUser", "grpcSecret12")
        [answer] = list(stub.ReceiveMessage(request, metadata=md, timeout=10))
    assert (answer.status.code, answer.status.message) == (pb.FORBIDDEN, "No permission for topic:GrpcAclPubOnly")
