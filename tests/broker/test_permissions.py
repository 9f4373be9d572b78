"""Permissions the broker enforces over real frames: a topic without write permission refuses
sends with NO_PERMISSION, a group with consumeEnable=false cannot pull."""

from __future__ import annotations

import json
from pathlib import Path

from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.admin_headers import CreateTopicRequestHeader
from support.broker_wire import Wire, run_broker

READ_ONLY = 4


def test_a_send_to_a_topic_without_write_permission_gets_no_permission(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        header = CreateTopicRequestHeader("ReadOnly", "TBW102", 2, 2, READ_ONLY, "SINGLE_TAG", False).to_fields()
        assert (await w.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header)).code == ResponseCode.SUCCESS
        response = await w.send("ReadOnly", b"refused")
        assert (response.code, response.remark) == (
            ResponseCode.NO_PERMISSION,
            "the topic[ReadOnly] sending message is forbidden",
        )
        assert (await w.call(RequestCode.GET_MAX_OFFSET, {"topic": "ReadOnly", "queueId": "0"})).ext_fields[
            "offset"
        ] == "0"
        await w.send_ok("Writable", b"still served")

    run_broker(tmp_path / "store", scenario)


def test_a_group_with_consume_disabled_cannot_pull(tmp_path: Path) -> None:
    config = tmp_path / "store" / "config"
    config.mkdir(parents=True)
    (config / "subscriptionGroup.json").write_text(
        json.dumps({"subscriptionGroupTable": {"Frozen": {"groupName": "Frozen", "consumeEnable": False}}})
    )

    async def scenario(w: Wire) -> None:
        await w.send_ok("T", b"m0")
        response = await w.pull("Frozen", "T", 0, 0)
        assert (response.code, response.remark) == (
            ResponseCode.NO_PERMISSION,
            "subscription group no permission, Frozen",
        )
        assert len(await w.pull_records("Thawed", "T", 0)) == 1

    run_broker(tmp_path / "store", scenario)
