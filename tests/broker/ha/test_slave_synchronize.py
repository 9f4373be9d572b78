"""SlaveSynchronize between two in-process brokers: topics, consumer offsets, delay offsets, groups.

The slave is told its master's address directly (the NameServer path is in test_ha_processes.py)
and each round is run by the test, so nothing waits on the 10 s period.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from sparkmq.broker.config import BrokerConfig
from sparkmq.broker.controller import BrokerController
from sparkmq.broker.ha.sync import decode_groups, encode_groups
from sparkmq.broker.subscriptions import SubscriptionGroupConfig
from sparkmq.errors import ConfigError, InvalidFieldError
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.admin_headers import CreateTopicRequestHeader
from support.broker_wire import Wire, small_config


async def commit(wire: Wire, group: str, topic: str, queue_id: int, offset: int) -> None:
    fields = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id), "commitOffset": str(offset)}
    assert (await wire.call(RequestCode.UPDATE_CONSUMER_OFFSET, fields)).code == ResponseCode.SUCCESS


async def committed(wire: Wire, group: str, topic: str, queue_id: int) -> int:
    fields = {"consumerGroup": group, "topic": topic, "queueId": str(queue_id)}
    return int((await wire.call(RequestCode.QUERY_CONSUMER_OFFSET, fields)).ext_fields.get("offset", "-1"))


def test_slave_copies_the_four_tables_and_hands_back_offsets_it_took(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with BrokerController(small_config(tmp_path / "m", ha_listen_port=0)) as master:
            slave_cfg = small_config(
                tmp_path / "s",
                broker_id=1,
                broker_role="SLAVE",
                ha_listen_port=0,
                ha_master_address=master.config.ha_address,
            )
            to_master = Wire(master)
            try:
                header = CreateTopicRequestHeader("SyncTopic", "TBW102", 3, 3, 6, "SINGLE_TAG", False)
                created = await to_master.call(RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_fields())
                assert created.code == ResponseCode.SUCCESS
                await to_master.pull("SyncGroup", "SyncTopic", 0, 0)  # a pull creates the group
                await commit(to_master, "SyncGroup", "SyncTopic", 0, 5)
                await to_master.send_ok("SyncDelay", b"later", props={"DELAY": "1"})
                while not (await to_master.call(RequestCode.GET_ALL_DELAY_OFFSET)).body.count(b'"1"'):
                    await asyncio.sleep(0.05)  # the 1 s level delivers it and records its progress
                async with BrokerController(slave_cfg) as slave:
                    assert slave.slave_sync is not None and slave.context is not None
                    slave.slave_sync.learn_master(master.config.address)
                    assert await slave.slave_sync.sync_all()
                    ctx, mctx = slave.context, master.context
                    assert mctx is not None
                    assert ctx.topics.get("SyncTopic") == mctx.topics.get("SyncTopic")
                    assert ctx.topics.data_version == mctx.topics.data_version
                    assert ctx.offsets.query("SyncGroup", "SyncTopic", 0) == 5
                    assert ctx.groups.groups == mctx.groups.groups and "SyncGroup" in ctx.groups.groups
                    assert slave._schedule is not None and master._schedule is not None
                    assert slave._schedule.offsets == master._schedule.offsets != {}

                    to_slave = Wire(slave)
                    try:
                        await commit(to_slave, "SyncGroup", "SyncTopic", 0, 9)  # as while the master was away
                        await commit(to_master, "SyncGroup", "SyncTopic", 1, 4)
                        assert await slave.slave_sync.sync_all()
                        assert await committed(to_master, "SyncGroup", "SyncTopic", 0) == 9
                        assert await committed(to_slave, "SyncGroup", "SyncTopic", 0) == 9
                        assert await committed(to_slave, "SyncGroup", "SyncTopic", 1) == 4
                        await commit(to_master, "SyncGroup", "SyncTopic", 0, 2)  # a reset on the master wins
                        assert await slave.slave_sync.sync_all()
                        assert await committed(to_slave, "SyncGroup", "SyncTopic", 0) == 2
                    finally:
                        await to_slave.close()
            finally:
                await to_master.close()

    asyncio.run(scenario())


@pytest.mark.parametrize(("role", "broker_id"), [("SLAVE", 0), ("SYNC_MASTER", 1), ("MASTER", 0)])
def test_broker_role_and_id_must_agree(role: str, broker_id: int) -> None:
    with pytest.raises(ConfigError, match="brokerRole|brokerId"):
        BrokerConfig.from_properties({"brokerRole": role, "brokerId": str(broker_id)})


def test_ha_keys_parse_from_broker_conf() -> None:
    config = BrokerConfig.from_properties(
        {
            "brokerRole": "SLAVE",
            "brokerId": "1",
            "haListenPort": "10912",
            "haMasterAddress": "10.0.0.1:10912",
            "haSendHeartbeatInterval": "1000",
            "haTransferBatchSize": "65536",
            "haSlaveFallbehindMax": "1024",
            "slaveReadEnable": "true",
            "accessMessageInMemoryMaxRatio": "30",
        }
    )
    assert (config.is_slave, config.ha_address, config.ha_master_address) == (True, "127.0.0.1:10912", "10.0.0.1:10912")
    assert (config.ha_send_heartbeat_interval, config.ha_transfer_batch_size, config.ha_slave_fallbehind_max) == (
        1000,
        65536,
        1024,
    )
    assert BrokerConfig(listen_port=10911).ha_address == "127.0.0.1:10912"  # listenPort + 1 by default


def test_a_groups_body_keeps_every_field_a_slave_serves_by() -> None:
    groups = {
        "Fifo": SubscriptionGroupConfig("Fifo", False, 2, 3, True),
        "Plain": SubscriptionGroupConfig("Plain", True, 1, 16, False),
    }
    assert decode_groups(encode_groups(groups)) == groups
    with pytest.raises(InvalidFieldError):
        decode_groups(b"[1, 2]")
