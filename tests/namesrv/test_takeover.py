"""A live broker's registration belongs to its connection: others cannot take it over or drop it."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from sparkmq.namesrv import NameServer, NamesrvConfig
from sparkmq.namesrv.processors import body_crc32
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.admin_headers import RegisterBrokerRequestHeader, UnRegisterBrokerRequestHeader
from sparkmq.protocol.bodies import TopicRouteData
from sparkmq.protocol.namesrv_bodies import DataVersion, RegisterBrokerBody, TopicConfig, TopicConfigSerializeWrapper
from sparkmq.remoting import RemotingClient

CLUSTER = "DefaultCluster"
REAL, EVIL = "127.0.0.1:10911", "127.0.0.1:6666"


class Clock:
    """A millisecond clock the test moves by hand (expiry without sleeping)."""

    def __init__(self) -> None:
        self.now = 1_000_000

    def __call__(self) -> int:
        return self.now


Body = Callable[[NameServer, RemotingClient, RemotingClient, str, Clock], Awaitable[None]]


def run(body: Body, *, guard: bool = True) -> None:
    async def main() -> None:
        clock = Clock()
        config = NamesrvConfig("127.0.0.1", 0, broker_expired_s=120.0, guard_registrations=guard)
        async with NameServer(config, clock=clock) as namesrv:
            broker, intruder = RemotingClient(), RemotingClient()
            try:
                await body(namesrv, broker, intruder, namesrv.address, clock)
            finally:
                await broker.close()
                await intruder.close()

    asyncio.run(main())


async def register(
    client: RemotingClient, namesrv: str, addr: str, *, name: str = "broker-a", broker_id: int = 0
) -> RemotingCommand:
    body = RegisterBrokerBody(TopicConfigSerializeWrapper({"T": TopicConfig("T", 4, 4)}, DataVersion(1, 1))).encode()
    header = RegisterBrokerRequestHeader(name, addr, CLUSTER, addr, broker_id, body_crc32=body_crc32(body))
    return await client.invoke(namesrv, RequestCode.REGISTER_BROKER, header.to_fields(), body)


async def unregister(client: RemotingClient, namesrv: str, addr: str, *, name: str = "broker-a") -> RemotingCommand:
    header = UnRegisterBrokerRequestHeader(name, addr, CLUSTER, 0)
    return await client.invoke(namesrv, RequestCode.UNREGISTER_BROKER, header.to_fields())


async def master_of(client: RemotingClient, namesrv: str) -> str | None:
    response = await client.invoke(namesrv, RequestCode.GET_ROUTEINFO_BY_TOPIC, {"topic": "T"})
    if response.code != ResponseCode.SUCCESS:
        return None
    return TopicRouteData.decode(response.body).broker_datas[0].broker_addrs.get(0)


def test_another_connection_cannot_take_over_or_drop_a_live_broker() -> None:
    async def body(
        namesrv: NameServer, broker: RemotingClient, intruder: RemotingClient, address: str, clock: Clock
    ) -> None:
        assert (await register(broker, address, REAL)).code == ResponseCode.SUCCESS
        for refused in (
            await register(intruder, address, EVIL),  # same name and id, another address
            await register(intruder, address, REAL, name="broker-evil"),  # the live address, renamed
            await unregister(intruder, address, REAL),
            await unregister(intruder, address, EVIL),
        ):  # a bogus address, the live broker's id
            assert refused.code == ResponseCode.NO_PERMISSION
            assert "from another live connection" in (refused.remark or "")
        assert await master_of(intruder, address) == REAL
        assert (await register(broker, address, REAL)).code == ResponseCode.SUCCESS  # its own refresh is fine
        assert (await unregister(broker, address, REAL)).code == ResponseCode.SUCCESS
        assert await master_of(intruder, address) is None

    run(body)


def test_a_restarted_broker_registers_again_once_its_old_connection_closed() -> None:
    async def body(
        namesrv: NameServer, broker: RemotingClient, intruder: RemotingClient, address: str, clock: Clock
    ) -> None:
        await register(broker, address, REAL)
        await broker.close()  # the old process died; the server evicts its routes when it sees the close
        while namesrv.routes.live_broker_addrs:
            await asyncio.sleep(0.01)
        restarted = RemotingClient()
        try:
            assert (await register(restarted, address, REAL)).code == ResponseCode.SUCCESS
            assert await master_of(restarted, address) == REAL
        finally:
            await restarted.close()

    run(body)


def test_an_expired_registration_can_be_replaced_from_another_connection() -> None:
    async def body(
        namesrv: NameServer, broker: RemotingClient, intruder: RemotingClient, address: str, clock: Clock
    ) -> None:
        await register(broker, address, REAL)  # its connection stays open but it stops registering
        clock.now += 120_001
        assert (await register(intruder, address, EVIL)).code == ResponseCode.SUCCESS
        assert await master_of(intruder, address) == EVIL

    run(body)


def test_the_guard_can_be_turned_off_for_java_behaviour() -> None:
    async def body(
        namesrv: NameServer, broker: RemotingClient, intruder: RemotingClient, address: str, clock: Clock
    ) -> None:
        await register(broker, address, REAL)
        assert (await register(intruder, address, EVIL)).code == ResponseCode.SUCCESS
        assert await master_of(intruder, address) == EVIL

    run(body, guard=False)


def test_a_registered_replica_of_the_group_may_take_the_master_id() -> None:
    """A controller promoted the replica while the old master's connection is still open; a broker
    outside the group still may not take the id."""

    async def body(
        namesrv: NameServer, broker: RemotingClient, intruder: RemotingClient, address: str, clock: Clock
    ) -> None:
        replica = RemotingClient()
        try:
            assert (await register(broker, address, REAL)).code == ResponseCode.SUCCESS
            assert (await register(intruder, address, EVIL)).code == ResponseCode.NO_PERMISSION
            assert (await register(replica, address, "127.0.0.1:10921", broker_id=2)).code == ResponseCode.SUCCESS
            assert (await register(replica, address, "127.0.0.1:10921")).code == ResponseCode.SUCCESS
            assert await master_of(intruder, address) == "127.0.0.1:10921"
        finally:
            await replica.close()

    run(body)
