"""ACL 1.0 on the wire: each check and each per-request-code resource rule, on a real broker.

Every request goes over a real socket to an in-process broker with ``aclEnable=true``; a refusal
is NO_PERMISSION with RocketMQ's remark naming the failed check.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sparkmq.broker.controller import BrokerController
from sparkmq.errors import ConfigError
from sparkmq.message.record import iter_records
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.acl_signing import SessionCredentials, content_to_sign, signature
from sparkmq.protocol.frame import FrameDecoder
from sparkmq.remoting import RemotingClient
from support.broker_wire import RawRequest, Wire, cpp_heartbeat, small_config

ACCOUNTS = """\
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    defaultTopicPerm: DENY
    defaultGroupPerm: SUB
    topicPerms:
      - topicA=DENY
      - topicB=PUB|SUB
      - topicC=SUB
      - topicP=PUB
      - RMQ_SYS_TRACE_TOPIC=DENY
    groupPerms:
      - groupA=DENY
      - groupB=PUB|SUB
  - accessKey: adminUser
    secretKey: adminSecret
    admin: true
  - accessKey: adminLimited
    secretKey: adminSecret
    admin: true
    topicPerms:
      - topicB=SUB
"""
GOOD = SessionCredentials("RocketMQ", "12345678")
ADMIN = SessionCredentials("adminUser", "adminSecret")
Scenario = Callable[["AclWire"], Awaitable[None]]


class AclWire(Wire):
    """A Wire whose calls are signed with ``credentials`` (None: unsigned)."""

    async def as_(
        self, credentials: SessionCredentials | None, code: int, fields: dict[str, str] | None = None, body: bytes = b""
    ) -> RemotingCommand:
        self.client.signer = None if credentials is None else credentials.sign
        try:
            return await self.call(code, fields, body)
        finally:
            self.client.signer = None


def run_acl(tmp_path: Path, scenario: Scenario, accounts: str = ACCOUNTS, **overrides: Any) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text(accounts)
    config = small_config(tmp_path / "store", acl_enable=True, acl_file=acl_file, **overrides)

    async def main() -> None:
        async with BrokerController(config) as broker:
            wire = AclWire(broker)
            try:
                await scenario(wire)
            finally:
                await wire.close()

    asyncio.run(main())


def send_fields(topic: str, group: str = "PID") -> dict[str, str]:
    return {
        "a": group,
        "b": topic,
        "c": "TBW102",
        "d": "4",
        "e": "0",
        "f": "0",
        "g": "1700000000000",
        "h": "0",
        "i": "",
    }


def pull_fields(group: str, topic: str) -> dict[str, str]:
    return {
        "consumerGroup": group,
        "topic": topic,
        "queueId": "0",
        "queueOffset": "0",
        "maxMsgNums": "1",
        "sysFlag": "0",
        "commitOffset": "0",
        "suspendTimeoutMillis": "0",
        "subVersion": "0",
    }


def assert_refused(response: RemotingCommand, remark: str) -> None:
    assert response.code == ResponseCode.NO_PERMISSION, response
    assert response.remark == remark


def test_identity_checks(tmp_path: Path) -> None:
    async def scenario(wire: AclWire) -> None:
        code, fields = RequestCode.SEND_MESSAGE_V2, send_fields("topicB")
        assert (await wire.as_(GOOD, code, fields, b"x")).code == ResponseCode.SUCCESS
        assert_refused(await wire.as_(None, code, fields, b"x"), "No accessKey is configured")
        assert_refused(
            await wire.as_(SessionCredentials("Stranger", "12345678"), code, fields, b"x"), "No acl config for Stranger"
        )
        assert_refused(
            await wire.as_(SessionCredentials("RocketMQ", "wrong-secret"), code, fields, b"x"),
            "Check signature failed for accessKey=RocketMQ",
        )
        # A body changed after signing fails the check too: the body is signed.
        signed = GOOD.sign(fields, b"x")
        assert_refused(await wire.call(code, signed, b"y"), "Check signature failed for accessKey=RocketMQ")
        assert wire.broker.acl is not None and wire.broker.acl.denied == 4

    run_acl(tmp_path, scenario)


def test_cpp_style_numbers_and_booleans_are_signed_as_their_text(tmp_path: Path) -> None:
    """C++ and ali-ons put JSON numbers and booleans in extFields; they signed the decimal / lowercase text."""

    async def scenario(wire: AclWire) -> None:
        fields: dict[str, Any] = {
            **send_fields("topicB"),
            "d": 4,
            "e": 0,
            "k": False,
            "AccessKey": "RocketMQ",
            "OnsChannel": "ALIYUN",
        }
        as_text = {k: str(v).lower() if isinstance(v, bool) else str(v) for k, v in fields.items()}
        fields["Signature"] = signature("12345678", content_to_sign(as_text, b"body"))
        connection = await wire.client.connection(wire.address)
        request = RawRequest(310, connection.next_opaque(), fields, b"body")
        response = await connection.request(request, 5.0)
        assert response.code == ResponseCode.SUCCESS, response

    run_acl(tmp_path, scenario)


def test_send_rules(tmp_path: Path) -> None:
    async def scenario(wire: AclWire) -> None:
        v1 = {
            "producerGroup": "PID",
            "topic": "topicB",
            "defaultTopic": "TBW102",
            "defaultTopicQueueNums": "4",
            "queueId": "0",
            "sysFlag": "0",
            "bornTimestamp": "0",
            "flag": "0",
        }
        assert (await wire.as_(GOOD, RequestCode.SEND_MESSAGE, v1, b"x")).code == ResponseCode.SUCCESS
        assert (await wire.as_(GOOD, RequestCode.SEND_MESSAGE_V2, send_fields("topicP"), b"x")).code == 0
        assert_refused(
            await wire.as_(GOOD, RequestCode.SEND_MESSAGE_V2, send_fields("topicA"), b"x"),
            "No permission for topic:topicA",
        )
        assert_refused(
            await wire.as_(GOOD, RequestCode.SEND_MESSAGE_V2, send_fields("topicC"), b"x"),
            "No permission for topic:topicC",
        )
        assert_refused(
            await wire.as_(GOOD, RequestCode.SEND_MESSAGE_V2, send_fields("unlisted"), b"x"),
            "No default permission for topic:unlisted",
        )
        # A send to a retry topic is checked as SUB on the group named in the header.
        response = await wire.as_(GOOD, RequestCode.SEND_MESSAGE_V2, send_fields("%RETRY%groupA", "groupA"), b"x")
        assert_refused(response, "No permission for group:groupA")
        response = await wire.as_(GOOD, RequestCode.SEND_MESSAGE_V2, send_fields("%RETRY%groupZ", "groupZ"), b"x")
        assert response.code != ResponseCode.NO_PERMISSION  # default group perm SUB
        # The message-trace exception: PUB on RMQ_SYS_TRACE_TOPIC passes whatever the account lists.
        trace = await wire.as_(GOOD, RequestCode.SEND_MESSAGE_V2, send_fields("RMQ_SYS_TRACE_TOPIC"), b"x")
        assert trace.code != ResponseCode.NO_PERMISSION

    run_acl(tmp_path, scenario)


def test_pull_offset_and_group_rules(tmp_path: Path) -> None:
    async def scenario(wire: AclWire) -> None:
        ok = await wire.as_(GOOD, RequestCode.PULL_MESSAGE, pull_fields("groupB", "topicC"))
        assert ok.code != ResponseCode.NO_PERMISSION, ok
        assert_refused(
            await wire.as_(GOOD, RequestCode.PULL_MESSAGE, pull_fields("groupB", "topicP")),
            "No permission for topic:topicP",
        )
        assert_refused(
            await wire.as_(GOOD, RequestCode.PULL_MESSAGE, pull_fields("groupA", "topicC")),
            "No permission for group:groupA",
        )
        update = {"consumerGroup": "groupA", "topic": "topicC", "queueId": "0", "commitOffset": "0"}
        assert_refused(
            await wire.as_(GOOD, RequestCode.UPDATE_CONSUMER_OFFSET, update), "No permission for group:groupA"
        )
        update["consumerGroup"] = "groupB"
        assert (await wire.as_(GOOD, RequestCode.UPDATE_CONSUMER_OFFSET, update)).code == ResponseCode.SUCCESS
        query = {"consumerGroup": "groupB", "topic": "topicA", "queueId": "0"}
        assert_refused(await wire.as_(GOOD, RequestCode.QUERY_CONSUMER_OFFSET, query), "No permission for topic:topicA")
        for code, field in (
            (RequestCode.GET_CONSUMER_LIST_BY_GROUP, "consumerGroup"),
            (RequestCode.CONSUMER_SEND_MSG_BACK, "group"),
        ):
            assert_refused(
                await wire.as_(GOOD, code, {field: "groupA", "offset": "0", "delayLevel": "0"}),
                "No permission for group:groupA",
            )
        unregister = {"clientID": "c1", "consumerGroup": "groupA"}
        assert_refused(
            await wire.as_(GOOD, RequestCode.UNREGISTER_CLIENT, unregister), "No permission for group:groupA"
        )
        assert_refused(
            await wire.as_(
                GOOD,
                RequestCode.QUERY_MESSAGE,
                {"topic": "topicA", "key": "k", "maxNum": "1", "beginTimestamp": "0", "endTimestamp": "1"},
            ),
            "No permission for topic:topicA",
        )
        # Codes with no resource rule only need a valid signature.
        assert (await wire.as_(GOOD, RequestCode.GET_MAX_OFFSET, {"topic": "topicA", "queueId": "0"})).code != 16

    run_acl(tmp_path, scenario)


def test_heartbeat_checks_every_group_and_subscribed_topic(tmp_path: Path) -> None:
    async def scenario(wire: AclWire) -> None:
        ok = await wire.as_(GOOD, RequestCode.HEART_BEAT, body=cpp_heartbeat("c1", "groupB", {"topicC": "*"}))
        assert ok.code == ResponseCode.SUCCESS, ok
        body = cpp_heartbeat("c1", "groupA", {"topicC": "*"})
        assert_refused(await wire.as_(GOOD, RequestCode.HEART_BEAT, body=body), "No permission for group:groupA")
        body = cpp_heartbeat("c1", "groupB", {"topicA": "*"})
        assert_refused(await wire.as_(GOOD, RequestCode.HEART_BEAT, body=body), "No permission for topic:topicA")
        producer_only = json.dumps({"clientID": "c1", "producerDataSet": [{"groupName": "anything"}]}).encode()
        assert (await wire.as_(GOOD, RequestCode.HEART_BEAT, body=producer_only)).code == ResponseCode.SUCCESS

    run_acl(tmp_path, scenario)


def test_admin_codes_need_admin(tmp_path: Path) -> None:
    async def scenario(wire: AclWire) -> None:
        create = {
            "topic": "newTopic",
            "defaultTopic": "TBW102",
            "readQueueNums": "4",
            "writeQueueNums": "4",
            "perm": "6",
            "topicFilterType": "SINGLE_TAG",
            "topicSysFlag": "0",
            "order": "false",
        }
        assert_refused(
            await wire.as_(GOOD, RequestCode.UPDATE_AND_CREATE_TOPIC, create),
            "Need admin permission for request code=17, but accessKey=RocketMQ is not",
        )
        assert (await wire.as_(ADMIN, RequestCode.UPDATE_AND_CREATE_TOPIC, create)).code == ResponseCode.SUCCESS
        # An admin with no topic/group perms passes every resource check ...
        assert (await wire.as_(ADMIN, RequestCode.SEND_MESSAGE_V2, send_fields("anyTopic"), b"x")).code == 0
        # ... an admin with explicit perms is held to them (RocketMQ 4.9.x).
        limited = SessionCredentials("adminLimited", "adminSecret")
        assert_refused(
            await wire.as_(limited, RequestCode.SEND_MESSAGE_V2, send_fields("topicB"), b"x"),
            "No permission for topic:topicB",
        )
        assert_refused(
            await wire.as_(GOOD, RequestCode.DELETE_TOPIC_IN_BROKER, {"topic": "newTopic"}),
            "Need admin permission for request code=215, but accessKey=RocketMQ is not",
        )

    run_acl(tmp_path, scenario)


WHITE = """\
globalWhiteRemoteAddresses:
  - {global_white}
accounts:
  - accessKey: RocketMQ
    secretKey: 12345678
    whiteRemoteAddress: {account_white}
    defaultTopicPerm: DENY
"""


def test_global_white_address_skips_every_check(tmp_path: Path) -> None:
    async def scenario(wire: AclWire) -> None:
        response = await wire.as_(None, RequestCode.SEND_MESSAGE_V2, send_fields("denied"), b"x")
        assert response.code == ResponseCode.SUCCESS, response

    run_acl(tmp_path, scenario, WHITE.format(global_white="127.0.0.*", account_white="10.0.0.1"))


def test_account_white_address_skips_signature_and_permissions(tmp_path: Path) -> None:
    async def scenario(wire: AclWire) -> None:
        wrong = SessionCredentials("RocketMQ", "not-the-secret")
        response = await wire.as_(wrong, RequestCode.SEND_MESSAGE_V2, send_fields("denied"), b"x")
        assert response.code == ResponseCode.SUCCESS, response
        assert_refused(
            await wire.as_(None, RequestCode.SEND_MESSAGE_V2, send_fields("denied"), b"x"), "No accessKey is configured"
        )  # the account white list needs the account named

    run_acl(tmp_path, scenario, WHITE.format(global_white="10.9.9.9", account_white="127.0.0.1"))


def test_reload_takes_a_changed_file_and_keeps_the_last_good_one(tmp_path: Path) -> None:
    async def scenario(wire: AclWire) -> None:
        acl = wire.broker.acl
        assert acl is not None
        newcomer = SessionCredentials("Newcomer", "newsecret")
        assert_refused(
            await wire.as_(newcomer, RequestCode.GET_MAX_OFFSET, {"topic": "t", "queueId": "0"}),
            "No acl config for Newcomer",
        )
        acl.path.write_text(ACCOUNTS + "  - accessKey: Newcomer\n    secretKey: newsecret\n")
        assert acl.reload_if_changed()
        assert (await wire.as_(newcomer, RequestCode.GET_MAX_OFFSET, {"topic": "t", "queueId": "0"})).code != 16
        acl.path.write_text(ACCOUNTS + "  - accessKey: Broken\n    secretKey: x\n")  # refused: secret too short
        assert not acl.reload_if_changed()
        assert (await wire.as_(newcomer, RequestCode.GET_MAX_OFFSET, {"topic": "t", "queueId": "0"})).code != 16
        assert acl.reloads == 1
        assert not acl.reload_if_changed()  # unchanged file: nothing to do

    run_acl(tmp_path, scenario)


def test_broker_reloads_on_its_own(tmp_path: Path) -> None:
    async def scenario(wire: AclWire) -> None:
        acl = wire.broker.acl
        assert acl is not None
        acl.path.write_text(ACCOUNTS.replace("12345678", "changed-secret"))
        for _ in range(1000):  # the broker's reload loop runs every 10 ms here
            if acl.reloads:
                break
            await asyncio.sleep(0.01)
        changed = SessionCredentials("RocketMQ", "changed-secret")
        assert (await wire.as_(changed, RequestCode.SEND_MESSAGE_V2, send_fields("topicB"), b"x")).code == 0

    run_acl(tmp_path, scenario, acl_reload_interval_ms=10)


def test_malformed_file_refuses_the_start(tmp_path: Path) -> None:
    acl_file = tmp_path / "plain_acl.yml"
    acl_file.write_text("accounts:\n  - accessKey: RocketMQ\n    secretKey: 123\n")
    with pytest.raises(ConfigError, match=r"plain_acl.yml line 3: .*secretKey"):
        BrokerController(small_config(tmp_path / "store", acl_enable=True, acl_file=acl_file))
    with pytest.raises(ConfigError, match="cannot be read"):
        BrokerController(small_config(tmp_path / "store", acl_enable=True, acl_file=tmp_path / "missing.yml"))


def test_acl_off_ignores_signature_fields(tmp_path: Path) -> None:
    async def main() -> None:
        async with BrokerController(small_config(tmp_path / "store")) as broker:
            client = RemotingClient(signer=SessionCredentials("Whoever", "whatever-secret").sign)
            try:
                response = await client.invoke(
                    broker.config.address, RequestCode.SEND_MESSAGE_V2, send_fields("T"), b"x"
                )
            finally:
                await client.close()
            assert response.code == ResponseCode.SUCCESS

    asyncio.run(main())


def test_sends_of_one_read_are_checked_one_by_one(tmp_path: Path) -> None:
    """Sends decoded from one read are served as a group put; the ACL check still sees each one."""

    async def scenario(wire: AclWire) -> None:
        frames, wrong = [], SessionCredentials("RocketMQ", "not-the-secret")
        plan = [GOOD, None, GOOD, wrong, GOOD]  # signed right, unsigned, right, wrong secret, right
        for opaque, credentials in enumerate(plan, start=1):
            fields = send_fields("topicB")
            if credentials is not None:
                fields = credentials.sign(fields, f"m{opaque}".encode())
            request = RemotingCommand.request(
                RequestCode.SEND_MESSAGE_V2, opaque, ext_fields=fields, body=f"m{opaque}".encode()
            )
            frames.append(request.encode())
        reader, writer = await asyncio.open_connection(*wire.address.split(":"))
        try:
            writer.write(b"".join(frames))  # one write: the broker decodes them together
            decoder, responses = FrameDecoder(), {}
            while len(responses) < len(frames):
                data = await reader.read(65536)
                assert data, f"connection closed after {len(responses)} responses"
                responses.update((command.opaque, command) for command in decoder.feed(data))
        finally:
            writer.close()
            await writer.wait_closed()

        assert [responses[i].code for i in (1, 3, 5)] == [ResponseCode.SUCCESS] * 3
        assert responses[2].code == responses[4].code == ResponseCode.NO_PERMISSION
        stored = wire.broker.store.get_messages("G", "topicB", 0, 0, 32, 1 << 20)
        assert sorted(bytes(record.body) for record in iter_records(stored.body())) == [b"m1", b"m3", b"m5"]

    run_acl(tmp_path, scenario)
