"""Master/slave pairs as real processes: a NameServer, ``sparkmq broker`` master and slave, SIGKILLs.

The slave learns its master's HA address from the NameServer's register result (no
``haMasterAddress``), as a RocketMQ 4.x slave does. Slaves run with RocketMQ's defaults (no
``slaveReadEnable``: they serve reads all the same) unless a test says otherwise.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparkmq.client import AsyncPullConsumer, PullConsumer
from sparkmq.protocol import RequestCode, ResponseCode
from support.ha_checks import FAST_HA, UNTIL_S, ask, known_topics, max_offsets, route_ids, send, wait_for_sync_link
from support.processes import BrokerProcess, NamesrvProcess, wait_until
from support.rocketmq_cpp import CppClientRun

BROKER = "broker-ha"
FAST = ("--set", f"brokerName={BROKER}", *FAST_HA)
SLAVE = ("--set", "brokerRole=SLAVE", "--set", "brokerId=1")  # RocketMQ's defaults: no slaveReadEnable
READ_ENABLE = ("--set", "slaveReadEnable=true")
CLIENT_TIMEOUT_S = 90.0


def start_master(root: Path, namesrv: str, *extra: str, port: int = 0) -> BrokerProcess:
    return BrokerProcess.start(root / "master", namesrv, *FAST, *extra, port=port)


def start_slave(root: Path, namesrv: str, *extra: str) -> BrokerProcess:
    return BrokerProcess.start(root / "slave", namesrv, *FAST, *SLAVE, *extra)


@pytest.fixture
def namesrv() -> Iterator[NamesrvProcess]:
    with NamesrvProcess.start() as process:
        yield process


def test_late_slave_catches_up_and_routes_list_it(tmp_path: Path, namesrv: NamesrvProcess) -> None:
    with start_master(tmp_path, namesrv.address) as master:
        for i in range(60):
            assert send(master.address, "HaLate", b"late %d" % i, i % 4).code == ResponseCode.SUCCESS
        assert route_ids(namesrv.address, "HaLate", BROKER) == {0}
        with start_slave(tmp_path, namesrv.address) as slave:
            assert wait_until(lambda: route_ids(namesrv.address, "HaLate", BROKER) == {0, 1}, UNTIL_S)
            # the topic config arrives by SlaveSynchronize, the data by HA
            assert wait_until(lambda: max_offsets(slave.address, "HaLate") == [15, 15, 15, 15], UNTIL_S)
            refused = send(slave.address, "HaLate", b"to the slave")
            assert refused.code == ResponseCode.SERVICE_NOT_AVAILABLE


def test_sigkill_of_a_sync_master_loses_no_acknowledged_message(tmp_path: Path, namesrv: NamesrvProcess) -> None:
    """Default configs: the real C++ client sends to a SYNC_MASTER, the master dies by SIGKILL, and new
    C++ consumer groups (a push and a pull consumer) read every acknowledged message from the slave."""
    topic, count = "HaCpp", 200
    with (
        start_master(tmp_path, namesrv.address, "--set", "brokerRole=SYNC_MASTER") as master,
        start_slave(tmp_path, namesrv.address) as slave,
    ):
        wait_for_sync_link(master.address)
        producer = cpp_run(tmp_path, "produce", namesrv.address, topic, "PID_HA", "--count", str(count))
        acknowledged = {r["index"] for r in producer.events("sent") if r["status"] == 0}
        assert len(acknowledged) == count  # the slave was up: every send was confirmed
        assert wait_until(lambda: sum(max_offsets(slave.address, topic)) == count, UNTIL_S)
        assert wait_until(lambda: topic in known_topics(slave.address), UNTIL_S)
        master.kill()
        assert wait_until(lambda: route_ids(namesrv.address, topic, BROKER) == {1}, UNTIL_S)
        reads = {
            "push": cpp_run(tmp_path, "push-consume", namesrv.address, topic, "CID_HA_PUSH", "--count", str(count)),
            "pull": cpp_run(tmp_path, "pull-consume", namesrv.address, topic, "CID_HA_PULL", "--count", str(count)),
        }
        assert slave.process.poll() is None
    for kind, run in reads.items():
        indexes = [int(r["properties"]["seq"]) for r in run.events("received")]
        assert acknowledged <= set(indexes), kind
        assert len(set(indexes)) == count, kind


def cpp_run(tmp_path: Path, command: str, namesrv: str, topic: str, group: str, *extra: str) -> CppClientRun:
    """One C++ client run to its clean exit (``--deadline 60`` for consumers)."""
    deadline = ("--deadline", "60") if command.endswith("consume") else ()
    run = CppClientRun.start(
        tmp_path / "home", command, "--namesrv", namesrv, "--topic", topic, "--group", group, *extra, *deadline
    )
    try:
        run.finish(CLIENT_TIMEOUT_S)
    finally:
        run.kill()
    return run


def test_sigkill_of_the_slave_gives_clean_errors_then_recovery(tmp_path: Path, namesrv: NamesrvProcess) -> None:
    """While the slave is dead every send is stored and answered SLAVE_NOT_AVAILABLE (or
    FLUSH_SLAVE_TIMEOUT for one in flight); a restarted slave copies what it missed and sends
    are confirmed again."""
    topic = "HaSlaveDies"
    allowed = {ResponseCode.SUCCESS, ResponseCode.SLAVE_NOT_AVAILABLE, ResponseCode.FLUSH_SLAVE_TIMEOUT}
    with start_master(
        tmp_path, namesrv.address, "--set", "brokerRole=SYNC_MASTER", "--set", "syncFlushTimeout=1000"
    ) as master:
        with start_slave(tmp_path, namesrv.address) as slave:
            wait_for_sync_link(master.address)
            codes = [send(master.address, topic, b"before %d" % i, i % 4).code for i in range(20)]
            assert set(codes) == {ResponseCode.SUCCESS}
            slave.kill()
            during = [send(master.address, topic, b"during %d" % i, i % 4) for i in range(20)]
        assert {r.code for r in during} <= allowed
        assert during[-1].code == ResponseCode.SLAVE_NOT_AVAILABLE
        assert all(r.ext_fields.get("msgId") for r in during)  # stored on the master all the same
        with start_slave(tmp_path, namesrv.address) as slave:
            wait_for_sync_link(master.address)
            assert send(master.address, topic, b"after", 0).code == ResponseCode.SUCCESS
            assert wait_until(lambda: max_offsets(slave.address, topic) == max_offsets(master.address, topic), UNTIL_S)
            assert max_offsets(master.address, topic) == [11, 10, 10, 10]


def test_offsets_committed_to_the_slave_survive_the_master_return(tmp_path: Path, namesrv: NamesrvProcess) -> None:
    """With the master down, sparkmq's pull consumer reads from the slave and commits there; once
    the master is back, the slave hands it those offsets and the master serves them."""
    topic = "HaOffsets"
    master = start_master(tmp_path, namesrv.address)
    try:
        for i in range(8):
            assert send(master.address, topic, b"o%d" % i, 0).code == ResponseCode.SUCCESS
        with start_slave(tmp_path, namesrv.address) as slave:
            assert wait_until(lambda: max_offsets(slave.address, topic)[0] == 8, UNTIL_S)
            assert wait_until(lambda: topic in known_topics(slave.address), UNTIL_S)  # else TOPIC_NOT_EXIST
            port = master.port
            master.kill()
            assert wait_until(lambda: route_ids(namesrv.address, topic, BROKER) == {1}, UNTIL_S)
            with PullConsumer("CID_HA_OFFSETS", namesrv.address) as consumer:
                queue = next(q for q in consumer.queues_of(topic) if q.queue_id == 0)
                consumer.assign([queue])
                consumer.seek(queue, 0)
                got: list[bytes] = []
                assert wait_until(lambda: got.extend(m.body for m in consumer.poll(0.2)) or len(got) >= 8, UNTIL_S)
                assert got == [b"o%d" % i for i in range(8)]
                consumer.commit()
            query = {"consumerGroup": "CID_HA_OFFSETS", "topic": topic, "queueId": "0"}
            assert ask(slave.address, RequestCode.QUERY_CONSUMER_OFFSET, query).ext_fields["offset"] == "8"
            master = start_master(tmp_path, namesrv.address, port=port)

            def master_has_it() -> bool:
                answer = ask(master.address, RequestCode.QUERY_CONSUMER_OFFSET, query)
                return answer.code == ResponseCode.SUCCESS and answer.ext_fields["offset"] == "8"

            assert wait_until(master_has_it, UNTIL_S), "the master never got the offset committed to the slave"
            assert ask(slave.address, RequestCode.QUERY_CONSUMER_OFFSET, query).ext_fields["offset"] == "8"
    finally:
        master.stop()


def test_sparkmq_consumer_follows_the_suggestion_to_the_slave(tmp_path: Path, namesrv: NamesrvProcess) -> None:
    """accessMessageInMemoryMaxRatio=0: the master suggests the slave after the first pull; with the
    master frozen (SIGSTOP, its connections open but silent) the following pulls still succeed."""
    topic = "HaSuggest"
    with (
        start_master(tmp_path, namesrv.address, *READ_ENABLE, "--set", "accessMessageInMemoryMaxRatio=0") as master,
        start_slave(tmp_path, namesrv.address, *READ_ENABLE) as slave,
    ):
        for i in range(8):
            assert send(master.address, topic, b"s%d" % i, 0).code == ResponseCode.SUCCESS
        assert wait_until(lambda: max_offsets(slave.address, topic)[0] == 8, UNTIL_S)
        assert wait_until(lambda: route_ids(namesrv.address, topic, BROKER) == {0, 1}, UNTIL_S)
        # The records reach the slave by replication, the topic by its next table sync: wait for both
        # (a pull the master suggests to the slave before then is TOPIC_NOT_EXIST; seen once in CI).
        assert wait_until(lambda: topic in known_topics(slave.address), UNTIL_S)

        async def read() -> tuple[list[bytes], int]:
            async with AsyncPullConsumer("CID_HA_SUGGEST", namesrv.address, auto_commit_interval_s=None) as consumer:
                queue = next(q for q in await consumer.queues_of(topic) if q.queue_id == 0)
                await consumer.assign([queue])
                consumer.seek(queue, 0)
                got = [m.body for m in await consumer.poll(5.0, max_messages=1)]  # served by the master
                suggested = consumer.instance.suggested_broker[queue]
                master.process.send_signal(signal.SIGSTOP)
                try:
                    while len(got) < 8:
                        got += [m.body for m in await consumer.poll(5.0)]
                finally:
                    master.process.send_signal(signal.SIGCONT)
                return got, suggested

        got, suggested = asyncio.run(read())
        assert suggested == 1
        assert got == [b"s%d" % i for i in range(8)]
