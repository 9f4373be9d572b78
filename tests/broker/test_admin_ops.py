"""The admin codes a broker serves for mqadmin, on the wire: good requests change the tables on disk,
bad ones get SYSTEM_ERROR (or Java's code) with the reason, and the broker keeps serving."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkmq.client.admin_ext import AdminExt
from sparkmq.errors import RemoteError
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.ops_bodies import SubscriptionGroupBody
from support.processes import BrokerProcess, NamesrvProcess

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[NamesrvProcess, BrokerProcess, Path]]:
    store = tmp_path_factory.mktemp("admin-ops-store")
    with NamesrvProcess.start() as ns, BrokerProcess.start(store, ns.address) as broker:
        yield ns, broker, store


def run(coro):
    return asyncio.run(coro)


def test_group_create_and_delete_reach_subscription_group_json(cluster) -> None:
    ns, broker, store = cluster

    async def scenario() -> None:
        async with AdminExt(ns.address) as admin:
            await admin.create_group(broker.address, SubscriptionGroupBody("CID_ops", retry_max_times=2))
            table = json.loads((store / "config" / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
            assert table["CID_ops"]["retryMaxTimes"] == 2
            listed = await admin.broker(broker.address, RequestCode.GET_ALL_SUBSCRIPTIONGROUP_CONFIG)
            assert "CID_ops" in json.loads(listed.body)["subscriptionGroupTable"]
            await admin.delete_group(broker.address, "CID_ops")
            table = json.loads((store / "config" / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
            assert "CID_ops" not in table
            with pytest.raises(RemoteError) as bad:
                await admin.delete_group(broker.address, "bad group name!")
            assert bad.value.code == ResponseCode.SYSTEM_ERROR

    run(scenario())


def test_broker_config_update_is_checked_and_applies(cluster) -> None:
    ns, broker, _store = cluster

    async def scenario() -> None:
        async with AdminExt(ns.address) as admin:
            with pytest.raises(RemoteError, match="maxTransferCountOnMessageInMemory='lots' is not a valid int"):
                await admin.update_broker_config(broker.address, {"maxTransferCountOnMessageInMemory": "lots"})
            with pytest.raises(RemoteError, match="properties line 1 is not key=value"):
                await admin.broker(broker.address, RequestCode.UPDATE_BROKER_CONFIG, body=b"garbage\n")
            await admin.update_broker_config(
                broker.address, {"maxTransferCountOnMessageInMemory": "7", "brokerName": "renamed"}
            )
            config = await admin.broker_config(broker.address)
            assert config["maxTransferCountOnMessageInMemory"] == "7"
            assert config["brokerName"] == "broker-a"  # identity is not changed on a running broker

    run(scenario())


def test_connection_lists_of_unknown_groups_are_errors_not_crashes(cluster) -> None:
    ns, broker, _store = cluster

    async def scenario() -> None:
        async with AdminExt(ns.address) as admin:
            with pytest.raises(RemoteError) as consumers:
                await admin.consumer_connection("CID_nobody")
            assert consumers.value.code == ResponseCode.CONSUMER_NOT_ONLINE
            with pytest.raises(RemoteError, match="not exist"):
                await admin.broker(broker.address, RequestCode.GET_PRODUCER_CONNECTION_LIST, {"producerGroup": "P"})
            with pytest.raises(RemoteError, match="topic\\[NoSuchTopic\\] not exist"):
                await admin.broker(
                    broker.address,
                    RequestCode.INVOKE_BROKER_TO_RESET_OFFSET,
                    {"topic": "NoSuchTopic", "group": "G", "timestamp": "0", "isForce": "true"},
                )
            with pytest.raises(RemoteError, match="The Consumer <CID_nobody> <1.2.3.4@9> not online") as running:
                await admin.consumer_running_info("CID_nobody", "1.2.3.4@9")
            assert running.value.code == ResponseCode.SYSTEM_ERROR
            assert await admin.queue_owners("CID_nobody") == {}
            assert (await admin.runtime_info(broker.address))["brokerVersionDesc"].startswith("sparkmq")

    run(scenario())


def test_wipe_then_add_write_perm_on_the_namesrv(cluster) -> None:
    ns, _broker, _store = cluster

    async def scenario() -> None:
        async with AdminExt(ns.address) as admin:
            wiped = await admin.write_perm("broker-a", add=False)
            assert wiped[ns.address] > 0
            assert not (await admin.topic_route("TBW102")).queue_datas[0].perm & 2
            added = await admin.write_perm("broker-a", add=True)
            assert added[ns.address] >= wiped[ns.address]
            assert (await admin.topic_route("TBW102")).queue_datas[0].perm & 2

    run(scenario())
