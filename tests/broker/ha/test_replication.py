"""Master/slave replication between two in-process brokers over real sockets (HA port + remoting).

The slave is pointed at the master with ``haMasterAddress``; the NameServer path is covered by
the process tests (test_ha_processes.py).
"""

from __future__ import annotations

import asyncio
import socket
import struct
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest

from sparkmq.broker.controller import BrokerController
from sparkmq.broker.ha.acks import SlaveAcks
from sparkmq.broker.ha.wire import decode_transfer_header, encode_report, encode_transfer_header
from sparkmq.errors import ProtocolError
from sparkmq.message.record import iter_records
from sparkmq.protocol import PullSysFlag, RequestCode, ResponseCode
from support.broker_wire import Wire, counted_lane, small_config

UNTIL_S = 10.0


async def until(predicate: Callable[[], bool], what: str, timeout_s: float = UNTIL_S) -> None:
    """Wait for ``predicate`` (a state the brokers reach by themselves), failing with ``what``."""
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not predicate():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.01)


def commitlog_bytes(broker: BrokerController, start: int | None = None) -> bytes:
    """The broker's CommitLog from ``start`` (default: its min offset) to its max offset."""
    store = broker.store
    assert store is not None
    offset, parts = store.commitlog.min_offset if start is None else start, []
    while True:
        run = store.read_commitlog(offset, 1 << 20)
        if not run:
            return b"".join(parts)
        parts.append(run)
        offset += len(run)


def master_config(root: Path, **overrides: Any):
    return small_config(root / "master", ha_listen_port=0, **overrides)


def slave_config(root: Path, master: BrokerController, **overrides: Any):
    values: dict[str, Any] = {
        "broker_id": 1,
        "broker_role": "SLAVE",
        "ha_listen_port": 0,
        "slave_read_enable": True,
        "ha_send_heartbeat_interval": 200,
        "ha_master_address": master.config.ha_address,
    }
    values.update(overrides)
    return small_config(root / "slave", **values)


def in_sync(master: BrokerController, slave: BrokerController) -> Callable[[], bool]:
    assert master.store is not None and slave.store is not None
    return lambda: slave.store.commitlog.max_offset == master.store.commitlog.max_offset


async def send_many(wire: Wire, topic: str, count: int, start: int = 0, size: int = 100) -> None:
    for i in range(start, start + count):
        await wire.send_ok(topic, f"m{i:06d}".encode().ljust(size, b"."), queue_id=i % 2)


def lane_counter(broker: BrokerController) -> list[int] | None:
    """The bytes each call of ``broker``'s native send lane takes from now on (None: no lane)."""
    if broker.server.lane is None:
        return None
    broker.server.lane, taken = counted_lane(broker.server.lane)
    return taken


def run(scenario: Awaitable[None]) -> None:
    asyncio.run(scenario)


def test_wire_codecs_are_rocketmq_bytes() -> None:
    assert encode_report(0x0102) == b"\x00\x00\x00\x00\x00\x00\x01\x02"
    assert encode_transfer_header(4096, 5) == struct.pack(">qi", 4096, 5)
    assert decode_transfer_header(struct.pack(">qi", 7, 0)) == (7, 0)
    with pytest.raises(ProtocolError):
        decode_transfer_header(struct.pack(">qi", -1, 3))


def test_late_slave_catches_up_and_follows_across_segments_and_cut_records(tmp_path: Path) -> None:
    """A slave started after 300 sends copies the log byte for byte, in 1000-byte runs that cut
    records and cross 64 KiB segment ends; ConsumeQueues and pulls on the slave match the master.

    As in RocketMQ 4.x, a slave with an empty store starts at the master's newest segment.
    """

    async def scenario() -> None:
        segment = 64 * 1024
        async with BrokerController(
            master_config(tmp_path, mapped_file_size_commit_log=segment, ha_transfer_batch_size=1000)
        ) as master:
            wire = Wire(master)
            try:
                await send_many(wire, "HaTopic", 300, size=500)
                newest_start = master.store.commitlog.queue.files[-1].start_offset
                assert newest_start > 0
                async with BrokerController(
                    slave_config(tmp_path, master, mapped_file_size_commit_log=segment)
                ) as slave:
                    await until(in_sync(master, slave), "the late slave to catch up")
                    await send_many(wire, "HaTopic", 50, start=300, size=500)
                    await until(in_sync(master, slave), "the slave to follow new sends")
                    assert slave.store.commitlog.min_offset == newest_start
                    assert commitlog_bytes(slave) == commitlog_bytes(master, newest_start)
                    assert len(slave.store.commitlog.queue.files) >= 2
                    for queue_id in (0, 1):
                        assert slave.store.max_offset_in_queue("HaTopic", queue_id) == 175
                    assert slave.slave_sync is not None  # no NameServer here to name the master: tell it
                    slave.slave_sync.learn_master(master.config.address)
                    assert await slave.slave_sync.sync_all()
                    reader = Wire(slave)
                    try:
                        records = await reader.pull_records("G", "HaTopic", 1, 170)
                    finally:
                        await reader.close()
                    assert [r.body[:7] for r in records] == [f"m{i:06d}".encode() for i in range(341, 350, 2)]
            finally:
                await wire.close()

    run(scenario())


def test_slave_restart_and_master_restart_resume_without_gap_or_duplicate(tmp_path: Path) -> None:
    async def scenario() -> None:
        config = master_config(tmp_path)
        async with BrokerController(config) as master:
            wire = Wire(master)
            try:
                await send_many(wire, "HaTopic", 40)
                async with BrokerController(slave_config(tmp_path, master)) as slave:
                    await until(in_sync(master, slave), "the first catch-up")
                await send_many(wire, "HaTopic", 30, start=40)  # while the slave is down
                async with BrokerController(slave_config(tmp_path, master)) as slave:
                    await until(in_sync(master, slave), "the restarted slave to resume")
                    assert master.ha is not None and master.ha.source is not None
                    assert master.ha.source.disconnect_all() == 1  # a dropped link
                    await send_many(wire, "HaTopic", 10, start=70)
                    await until(in_sync(master, slave), "the slave to reconnect after the link dropped")
                    assert commitlog_bytes(slave) == commitlog_bytes(master)
            finally:
                await wire.close()
            ha_port = master.config.ha_listen_port
        master_again = small_config(tmp_path / "master", ha_listen_port=ha_port)
        slave_again = slave_config(tmp_path, master, ha_master_address=f"127.0.0.1:{ha_port}")
        # the slave starts first and waits for its master to come back
        async with BrokerController(slave_again) as slave, BrokerController(master_again) as master:
            wire = Wire(master)
            try:
                await send_many(wire, "HaTopic", 40, start=80)
                await until(in_sync(master, slave), "the link to the restarted master")
                assert commitlog_bytes(slave) == commitlog_bytes(master)
                bodies = [r.body[:7] for r in iter_records(commitlog_bytes(slave), check_crc=True)]
                assert bodies == [f"m{i:06d}".encode() for i in range(120)]
            finally:
                await wire.close()

    run(scenario())


def test_sync_master_waits_for_the_slave_and_answers_slave_not_available_without_one(tmp_path: Path) -> None:
    """The first send creates the topic (the Python path); the native send lane, when built, serves the rest."""

    async def scenario() -> None:
        async with BrokerController(master_config(tmp_path, broker_role="SYNC_MASTER")) as master:
            taken = lane_counter(master)
            wire = Wire(master)
            try:
                for offset in range(2):
                    alone = await wire.send("HaTopic", b"before any slave", queue_id=0)
                    assert alone.code == ResponseCode.SLAVE_NOT_AVAILABLE
                    assert alone.ext_fields["msgId"] and alone.ext_fields["queueOffset"] == str(offset)  # stored
                async with BrokerController(slave_config(tmp_path, master)) as slave:
                    await until(lambda: master.ha.acks.connections == 1, "the slave link")
                    for i in range(20):
                        await wire.send_ok("HaTopic", b"confirmed %d" % i)
                        # acknowledged means the slave holds the bytes already
                        assert slave.store.commitlog.max_offset >= master.store.commitlog.max_offset
                    no_wait = await wire.send("HaTopic", b"WAIT=false", props={"WAIT": "false"})
                    assert no_wait.code == ResponseCode.SUCCESS
                assert taken is None or sum(taken) > 0, "the lane served the sends to the SYNC_MASTER"
            finally:
                await wire.close()

    run(scenario())


def test_sync_master_answers_flush_slave_timeout_when_the_slave_stops_acknowledging(tmp_path: Path) -> None:
    """A hand-driven HA peer reports offset 0 once, then reads and never acknowledges."""

    async def scenario() -> None:
        config = master_config(tmp_path, broker_role="SYNC_MASTER", sync_flush_timeout=300)
        async with BrokerController(config) as master:
            wire = Wire(master)
            mute = socket.create_connection(("127.0.0.1", master.config.ha_listen_port))
            try:
                mute.sendall(encode_report(0))
                await until(lambda: master.ha.acks.connections == 1, "the mute slave's link")
                taken = lane_counter(master)
                for body in (b"never confirmed", b"nor this one"):  # the topic's creation, then the lane's
                    response = await wire.send("HaTopic", body, queue_id=0)
                    assert response.code == ResponseCode.FLUSH_SLAVE_TIMEOUT
                    assert response.ext_fields["msgId"]
                assert taken is None or sum(taken) > 0, "the lane answered the second send"
                records = await wire.pull_records("G", "HaTopic", 0)
                assert [r.body for r in records] == [b"never confirmed", b"nor this one"]  # stored on the master
            finally:
                mute.close()
                await wire.close()

    run(scenario())


def test_async_master_acknowledges_at_once_and_slave_refuses_sends(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with BrokerController(master_config(tmp_path)) as master:
            wire = Wire(master)
            try:
                await wire.send_ok("HaTopic", b"no slave needed")
                async with BrokerController(slave_config(tmp_path, master)) as slave:
                    to_slave = Wire(slave)
                    try:
                        refused = await to_slave.send("HaTopic", b"to a slave")
                    finally:
                        await to_slave.close()
                    assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE
                    assert "slave mode" in (refused.remark or "")
                    await until(in_sync(master, slave), "the slave to copy the master")
            finally:
                await wire.close()

    run(scenario())


def test_pull_suggestions_follow_slave_read_enable_and_the_in_memory_window(tmp_path: Path) -> None:
    """accessMessageInMemoryMaxRatio=0 puts every record outside the in-memory window (Java's arithmetic:
    the newest record is its own size behind the end); the default 40 % keeps them all inside."""

    async def scenario() -> None:
        config = master_config(tmp_path, slave_read_enable=True, access_message_in_memory_max_ratio=0)
        async with BrokerController(config) as master:
            wire = Wire(master)
            try:
                for i in range(3):
                    await wire.send_ok("HaTopic", b"m%d" % i)
                old = await wire.pull("G", "HaTopic", 0, 0, max_nums=1)
                assert (old.code, old.ext_fields["suggestWhichBrokerId"]) == (ResponseCode.SUCCESS, "1")
                async with BrokerController(slave_config(tmp_path, master)) as slave:  # slaveReadEnable, 40 %
                    await until(in_sync(master, slave), "the slave to copy the master")
                    assert slave.slave_sync is not None
                    slave.slave_sync.learn_master(master.config.address)
                    await slave.slave_sync.sync_all()
                    reader = Wire(slave)
                    try:
                        served = await reader.pull("G", "HaTopic", 0, 0)
                    finally:
                        await reader.close()
                    assert (served.code, served.ext_fields["suggestWhichBrokerId"]) == (ResponseCode.SUCCESS, "0")
            finally:
                await wire.close()

    run(scenario())


def test_a_slave_with_default_config_serves_reads_as_java_does(tmp_path: Path) -> None:
    """No slaveReadEnable: the slave still answers a FOUND read SUCCESS with the records (suggesting the
    master), parks a pull at the queue's end until replication brings more, never moves an offset
    (PULL_RETRY_IMMEDIATELY at the requested offset) and never stores a pull's commitOffset."""

    async def scenario() -> None:
        async with BrokerController(master_config(tmp_path)) as master:
            wire = Wire(master)
            try:
                for i in range(3):
                    await wire.send_ok("HaTopic", b"m%d" % i, queue_id=0)
                async with BrokerController(slave_config(tmp_path, master, slave_read_enable=False)) as slave:
                    await until(in_sync(master, slave), "the slave to copy the master")
                    assert slave.slave_sync is not None and slave.context is not None
                    assert master.context is not None
                    slave.slave_sync.learn_master(master.config.address)
                    await slave.slave_sync.sync_all()
                    reader, holds = Wire(slave), slave.context.holds
                    try:
                        served = await reader.pull("G", "HaTopic", 0, 1)
                        beyond = await reader.pull("G", "HaTopic", 0, 9)
                        parked = asyncio.ensure_future(reader.pull("G", "HaTopic", 0, 3, suspend_ms=15000))
                        await until(lambda: ("HaTopic", 0) in holds._waiting, "the pull to park on the slave")
                        await wire.send_ok("HaTopic", b"m3", queue_id=0)
                        woken = await parked
                        committing = await reader.call(RequestCode.PULL_MESSAGE, pull_fields("GC", 0, 0, 2))
                    finally:
                        await reader.close()
                    fields = served.ext_fields
                    assert (served.code, fields["suggestWhichBrokerId"], fields["nextBeginOffset"]) == (
                        ResponseCode.SUCCESS,
                        "0",
                        "3",
                    )
                    assert [r.body for r in iter_records(served.body, check_crc=True)] == [b"m1", b"m2"]
                    assert (beyond.code, beyond.ext_fields["nextBeginOffset"]) == (
                        ResponseCode.PULL_RETRY_IMMEDIATELY,
                        "9",
                    )
                    assert beyond.ext_fields["suggestWhichBrokerId"] == "0" and not beyond.body
                    assert woken.code == ResponseCode.SUCCESS
                    assert [r.body for r in iter_records(woken.body, check_crc=True)] == [b"m3"]
                    assert committing.code == ResponseCode.SUCCESS
                    assert slave.context.offsets.query("GC", "HaTopic", 0) == -1
                    assert master.context.offsets.query("GC", "HaTopic", 0) == -1
            finally:
                await wire.close()

    run(scenario())


def pull_fields(group: str, queue_id: int, offset: int, commit_offset: int) -> dict[str, str]:
    """A PULL_MESSAGE header as the Java push consumer sends it: its subscription and a commitOffset."""
    flags = PullSysFlag.COMMIT_OFFSET | PullSysFlag.SUBSCRIPTION
    return {
        "consumerGroup": group,
        "topic": "HaTopic",
        "queueId": str(queue_id),
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": str(int(flags)),
        "commitOffset": str(commit_offset),
        "suspendTimeoutMillis": "0",
        "subscription": "*",
        "subVersion": "0",
    }


def test_a_promoted_slave_continues_the_queue_offsets(tmp_path: Path) -> None:
    """become_master, the hook automatic failover will call: the copy takes sends where the master stopped."""

    async def scenario() -> None:
        async with BrokerController(master_config(tmp_path)) as master:
            wire = Wire(master)
            try:
                await send_many(wire, "HaTopic", 10)
                async with BrokerController(slave_config(tmp_path, master)) as slave:
                    await until(in_sync(master, slave), "the slave to copy the master")
                    assert slave.ha is not None and slave.slave_sync is not None
                    slave.slave_sync.learn_master(master.config.address)
                    assert await slave.slave_sync.sync_all()  # the topic's config
                    await slave.ha.become_master()
                    promoted = Wire(slave)
                    try:
                        fields = await promoted.send_ok("HaTopic", b"after the promotion", queue_id=1)
                    finally:
                        await promoted.close()
                    assert fields["queueOffset"] == "5"
            finally:
                await wire.close()

    run(scenario())


def test_sync_master_confirms_a_group_of_sends_from_one_read_together(tmp_path: Path) -> None:
    """Pipelined sends decoded from one read are one group put: all acknowledged only once the slave
    holds the group's last byte."""
    import time

    from sparkmq.protocol import RemotingCommand, RequestCode
    from sparkmq.protocol.frame import FrameDecoder

    def frame(opaque: int) -> bytes:
        fields = {
            "a": "PID_G",
            "b": "HaTopic",
            "c": "TBW102",
            "d": "4",
            "e": "0",
            "f": "0",
            "g": str(int(time.time() * 1000)),
            "h": "0",
            "i": "WAIT\x01true",
            "j": "0",
            "k": "false",
            "m": "false",
        }
        body = b"grouped %d" % opaque
        return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, opaque, ext_fields=fields, body=body).encode()

    async def scenario() -> None:
        async with BrokerController(master_config(tmp_path, broker_role="SYNC_MASTER")) as master:
            wire = Wire(master)
            try:
                await wire.send("HaTopic", b"creates the topic")  # SLAVE_NOT_AVAILABLE: no slave yet
                async with BrokerController(slave_config(tmp_path, master)) as slave:
                    await until(lambda: master.ha.acks.connections == 1, "the slave link")
                    await until(in_sync(master, slave), "the slave to copy the first message")
                    reader, writer = await asyncio.open_connection("127.0.0.1", master.config.listen_port)
                    try:
                        writer.write(b"".join(frame(i) for i in range(1, 41)))  # one write
                        decoder, responses = FrameDecoder(), {}
                        while len(responses) < 40:
                            data = await reader.read(65536)
                            assert data, f"connection closed after {len(responses)} responses"
                            responses.update((c.opaque, c) for c in decoder.feed(data))
                            if len(responses) == 1:  # acknowledged means the slave holds the bytes
                                assert slave.store.commitlog.max_offset >= master.store.commitlog.max_offset
                    finally:
                        writer.close()
                        await writer.wait_closed()
                    assert {r.code for r in responses.values()} == {ResponseCode.SUCCESS}
                    assert slave.store.commitlog.max_offset == master.store.commitlog.max_offset
            finally:
                await wire.close()

    run(scenario())


def test_a_wait_for_a_slave_ack_runs_its_first_step_outside_a_task() -> None:
    """RemotingConnection._step runs a request's coroutine until it first suspends in no Task."""

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        acks = SlaveAcks()
        waiting = acks.wait(100, 30.0)
        stepped: list[Any] = []
        first_step_ran = asyncio.Event()

        def first_step() -> None:  # a plain loop callback, like a read callback: no current Task
            assert asyncio.current_task() is None
            try:
                stepped.append(waiting.send(None))
            except BaseException as exc:  # noqa: BLE001 - the assertion below shows it
                stepped.append(exc)
            first_step_ran.set()

        loop.call_soon(first_step)
        await first_step_ran.wait()
        (future,) = stepped
        assert isinstance(future, asyncio.Future), future
        acks.ack(acks.link("slave"), 100)
        assert future.done()
        with pytest.raises(StopIteration) as done:
            waiting.send(None)
        assert done.value.value is True
        assert await acks.wait(200, 0.001) is False  # the timer ends an unanswered wait
        assert await acks.wait(100, 0.001) is True  # at or below what a slave acknowledged: at once

    asyncio.run(scenario())
