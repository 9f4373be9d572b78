"""Transactional messages over real frames: half messages, END_TRANSACTION, check-back, restarts.

In-process brokers (``BrokerController`` on a loopback port) for the protocol paths; real
``sparkmq broker`` processes, stopped or killed and restarted on the same store, for the
"a restart loses no decision" paths. Checks are awaited as they arrive (``TxWire.checks``);
where a test needs rounds one at a time it runs them itself (``checker.check_once()``) with the
periodic loop set to an hour.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from sparkmq.broker.config import BrokerConfig
from sparkmq.broker.controller import BrokerController
from sparkmq.broker.transactions import TransactionService
from sparkmq.broker.transactions.check import TransactionCheckService
from sparkmq.broker.transactions.state import committed_message
from sparkmq.errors import ConfigError
from sparkmq.message import layout as L
from sparkmq.message.properties import encode_properties
from sparkmq.message.record import MessageBatch
from sparkmq.protocol import ResponseCode
from sparkmq.store import disk
from sparkmq.store.config import FlushDiskType
from support.broker_wire import small_config
from support.disk_faults import StalledSync
from support.processes import BrokerProcess
from support.tx_wire import COMMIT, ROLLBACK, UNKNOWN, Half, TxWire

GROUP = "PID_TX"
HALF, OP, DISCARDED = "RMQ_SYS_TRANS_HALF_TOPIC", "RMQ_SYS_TRANS_OP_HALF_TOPIC", "TRANS_CHECK_MAX_TIME_TOPIC"
HOUR_MS = 3_600_000
Scenario = Callable[[BrokerController, TxWire], Awaitable[None]]


def run_tx(tmp_path: Path, scenario: Scenario, **overrides: Any) -> None:
    """``scenario(broker, tx)`` against an in-process broker; by default nothing checks by itself."""
    settings: dict[str, Any] = dict(transaction_check_interval=HOUR_MS, transaction_time_out=0)
    settings.update(overrides)

    async def main() -> None:
        async with (
            BrokerController(small_config(tmp_path, **settings)) as broker,
            TxWire(broker.config.address, GROUP) as tx,
        ):
            await scenario(broker, tx)

    asyncio.run(main())


def checker(broker: BrokerController) -> TransactionCheckService:
    assert broker.transactions is not None
    return broker.transactions.checker


def bodies(records: list[Any]) -> list[bytes]:
    return [bytes(r.body) for r in records]


# --- prepare / END -----------------------------------------------------------------------------


def test_half_message_is_stored_in_the_half_topic_and_invisible(tmp_path: Path) -> None:
    async def scenario(broker: BrokerController, tx: TxWire) -> None:
        half = await tx.prepare("TxTopic", b"pending", queue_id=2)
        assert await tx.read("TxTopic", 2) == []
        (stored,) = await tx.read(HALF, 0)
        assert (stored.queue_offset, stored.physical_offset) == (half.queue_offset, half.commit_log_offset)
        assert L.transaction_type(stored.sys_flag) == L.TRANSACTION_NOT_TYPE  # so the half queue indexes it
        props = stored.properties
        assert (props["REAL_TOPIC"], props["REAL_QID"], props["TRAN_MSG"], props["PGROUP"]) == (
            "TxTopic",
            "2",
            "true",
            GROUP,
        )
        assert props["UNIQ_KEY"] == half.uniq_key and bytes(stored.body) == b"pending"

    run_tx(tmp_path, scenario)


def test_tran_msg_property_alone_also_makes_a_half_message(tmp_path: Path) -> None:
    async def scenario(broker: BrokerController, tx: TxWire) -> None:
        await tx.prepare("TxTopic", b"java-style", sys_flag=0)
        assert await tx.read("TxTopic", 1) == [] and len(await tx.read(HALF, 0)) == 1

    run_tx(tmp_path, scenario)


def test_commit_is_visible_exactly_once_and_a_second_end_is_harmless(tmp_path: Path) -> None:
    async def scenario(broker: BrokerController, tx: TxWire) -> None:
        half = await tx.prepare("TxTopic", b"order-1", props={"DELAY": "3", "color": "red"})
        assert await tx.end_ok(half, COMMIT) == ""
        (committed,) = await tx.read("TxTopic", 1)
        assert bytes(committed.body) == b"order-1" and committed.queue_offset == 0
        assert L.transaction_type(committed.sys_flag) == L.TRANSACTION_COMMIT_TYPE
        assert committed.prepared_transaction_offset == half.commit_log_offset
        props = committed.properties
        assert not {"REAL_TOPIC", "REAL_QID", "TRAN_MSG", "DELAY"} & set(props)
        assert (props["UNIQ_KEY"], props["PGROUP"], props["color"], props["TAGS"]) == (
            half.uniq_key,
            GROUP,
            "red",
            "TagTx",
        )
        (op,) = await tx.read(OP, 0)
        assert (bytes(op.body), op.properties["TAGS"], op.properties["KEYS"]) == (b"0", "d", half.uniq_key)
        again = await tx.end_ok(half, COMMIT)
        rollback_after = await tx.end_ok(half, ROLLBACK)
        assert "already ended" in again and "already ended" in rollback_after
        assert bodies(await tx.read("TxTopic", 1)) == [b"order-1"] and len(await tx.read(OP, 0)) == 1

    run_tx(tmp_path, scenario)


def test_with_sync_flush_a_commit_is_answered_once_durable_and_a_stalled_disk_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """END_TRANSACTION sent as a request (the C++ client's check-back path can): with SYNC flush a
    COMMIT is answered after its fsync, like a send; a disk that stalls past syncFlushTimeout gets
    FLUSH_DISK_TIMEOUT with a remark, and the commit stays stored, visible and ended once."""
    stall = StalledSync()

    async def scenario(broker: BrokerController, tx: TxWire) -> None:
        fine = await tx.prepare("TxTopic", b"flushed")
        assert await tx.end_ok(fine, COMMIT) == ""
        half = await tx.prepare("TxTopic", b"stalled")
        monkeypatch.setattr(disk, "fdatasync", stall)
        try:
            answer = await tx.end(half, COMMIT)
        finally:
            stall.release.set()  # the disk recovers (also when the answer came wrong: the broker must stop)
        assert stall.entered.is_set() and answer.code == ResponseCode.FLUSH_DISK_TIMEOUT, answer
        assert "is stored but not durable yet" in (answer.remark or "")
        assert bodies(await tx.read("TxTopic", 1)) == [b"flushed", b"stalled"]
        assert "already ended" in await tx.end_ok(half, COMMIT)

    try:
        run_tx(tmp_path, scenario, flush_disk_type=FlushDiskType.SYNC_FLUSH, sync_flush_timeout=200)
    finally:
        stall.release.set()


def test_concurrent_ends_for_one_half_message_commit_once(tmp_path: Path) -> None:
    async def scenario(broker: BrokerController, tx: TxWire) -> None:
        half = await tx.prepare("TxTopic", b"raced")
        async with TxWire(tx.address, GROUP) as other:
            answers = await asyncio.gather(*(w.end(half, COMMIT) for w in (tx, other, tx, other)))
        assert [a.code for a in answers] == [ResponseCode.SUCCESS] * 4
        assert sum("already ended" in (a.remark or "") for a in answers) == 3
        assert bodies(await tx.read("TxTopic", 1)) == [b"raced"]

    run_tx(tmp_path, scenario)


def test_rollback_is_never_visible(tmp_path: Path) -> None:
    async def scenario(broker: BrokerController, tx: TxWire) -> None:
        half = await tx.prepare("TxTopic", b"cancelled")
        await tx.end_ok(half, ROLLBACK)
        assert "already ended" in await tx.end_ok(half, COMMIT)  # a late COMMIT cannot resurrect it
        assert await tx.read("TxTopic", 1) == []
        assert bodies(await tx.read(OP, 0)) == [b"0"]
        kept = await tx.prepare("TxTopic", b"kept")
        await tx.end_ok(kept, COMMIT)
        assert bodies(await tx.read("TxTopic", 1)) == [b"kept"]

    run_tx(tmp_path, scenario)


def test_unknown_end_changes_nothing(tmp_path: Path) -> None:
    async def scenario(broker: BrokerController, tx: TxWire) -> None:
        half = await tx.prepare("TxTopic", b"undecided")
        assert "unknown" in await tx.end_ok(half, UNKNOWN)
        assert await tx.read("TxTopic", 1) == [] and await tx.read(OP, 0) == []
        await tx.end_ok(half, COMMIT)
        assert bodies(await tx.read("TxTopic", 1)) == [b"undecided"]

    run_tx(tmp_path, scenario)


def test_mismatched_end_is_refused_with_a_clear_remark(tmp_path: Path) -> None:
    async def scenario(broker: BrokerController, tx: TxWire) -> None:
        plain = await tx.call(
            310,
            {
                "a": GROUP,
                "b": "TxTopic",
                "c": "TBW102",
                "d": "4",
                "e": "0",
                "f": "0",
                "g": "1",
                "h": "0",
                "i": "PGROUP\x01PID_TX",
            },
            b"plain",
        )
        assert plain.code == ResponseCode.SUCCESS
        half = await tx.prepare("TxTopic", b"guarded")
        cases = [
            (dict(group="PID_OTHER"), "The producer group wrong"),
            (dict(queue_offset=half.queue_offset + 7), "The transaction state table offset wrong"),
            (dict(commit_log_offset=half.commit_log_offset + 3), "Find prepared transaction message failed"),
            (dict(commit_log_offset=10**12), "Find prepared transaction message failed"),
        ]
        # A committed normal message at offset 0 is no half message, whatever its properties say.
        plain_half = Half("x", 0, 0, "")
        refusals = [await tx.end(half, COMMIT, **kwargs) for kwargs, _ in cases]
        refusals.append(await tx.end(plain_half, COMMIT))
        refusals.append(await tx.end(half, 5))
        expected = [remark for _, remark in cases] + ["Find prepared transaction message failed", "none of 0, 8, 12"]
        for response, remark in zip(refusals, expected, strict=True):
            assert response.code == ResponseCode.SYSTEM_ERROR and remark in (response.remark or ""), response
        assert bodies(await tx.read("TxTopic", 1)) == [] and bodies(await tx.read("TxTopic", 0)) == [b"plain"]
        await tx.end_ok(half, COMMIT)  # the right END still works after the wrong ones
        assert bodies(await tx.read("TxTopic", 1)) == [b"guarded"]

    run_tx(tmp_path, scenario)


def test_batches_cannot_be_transactional(tmp_path: Path) -> None:
    async def scenario(broker: BrokerController, tx: TxWire) -> None:
        fields = {
            "a": GROUP,
            "b": "TxTopic",
            "c": "TBW102",
            "d": "4",
            "e": "0",
            "f": "4",
            "g": "1",
            "h": "0",
            "i": "",
            "m": "true",
        }
        response = await tx.call(320, fields, b"")
        assert response.code == ResponseCode.MESSAGE_ILLEGAL and "transaction" in (response.remark or "")

    run_tx(tmp_path, scenario)


# --- check-back ---------------------------------------------------------------------------------


def test_periodic_check_back_resolves_unknown_to_commit(tmp_path: Path) -> None:
    async def scenario(broker: BrokerController, tx: TxWire) -> None:
        await tx.heartbeat()
        half = await tx.prepare("TxTopic", b"asked", queue_id=3, props={"color": "blue"})
        check = await tx.next_check()  # the 1 s loop asks by itself
        message = check.message
        assert (message.topic, message.queue_id, bytes(message.body)) == ("TxTopic", 3, b"asked")
        assert message.properties["TRANSACTION_CHECK_TIMES"] == "1" and message.properties["color"] == "blue"
        assert check.header.msg_id == check.header.transaction_id == half.uniq_key
        assert check.header.tran_state_table_offset > half.queue_offset  # it names the re-appended copy
        assert (message.queue_offset, message.physical_offset) == (
            check.header.tran_state_table_offset,
            check.header.commit_log_offset,
        )
        await tx.end_ok(check.half, COMMIT, from_check=True)
        (committed,) = await tx.read("TxTopic", 3)
        assert (
            bytes(committed.body) == b"asked"
            and committed.prepared_transaction_offset == check.header.commit_log_offset
        )
        await tx.end_ok(half, COMMIT)  # the producer's own late END for the first copy: harmless
        assert bodies(await tx.read("TxTopic", 3)) == [b"asked"]

    run_tx(tmp_path, scenario, transaction_check_interval=1000)


def test_check_back_asks_again_after_unknown_then_rollback_ends_it(tmp_path: Path) -> None:
    async def scenario(broker: BrokerController, tx: TxWire) -> None:
        await tx.heartbeat()
        await tx.prepare("TxTopic", b"doubtful")
        assert await checker(broker).check_once() == 1
        first = await tx.next_check()
        await tx.end_ok(first.half, UNKNOWN, from_check=True)
        assert await checker(broker).check_once() == 1
        second = await tx.next_check()
        assert second.message.properties["TRANSACTION_CHECK_TIMES"] == "2"
        await tx.end_ok(second.half, ROLLBACK, from_check=True)
        assert await checker(broker).check_once() == 0  # ended: nobody is asked any more
        assert await tx.read("TxTopic", 1) == [] and tx.checks.empty()

    run_tx(tmp_path, scenario)


def test_young_half_messages_wait_for_the_timeout(tmp_path: Path) -> None:
    async def scenario(broker: BrokerController, tx: TxWire) -> None:
        await tx.heartbeat()
        await tx.prepare("TxTopic", b"young")
        await tx.prepare("TxTopic", b"immune", props={"CHECK_IMMUNITY_TIME_IN_SECONDS": "3600"})
        assert await checker(broker).check_once() == 0
        assert len(await tx.read(HALF, 0)) == 2  # nothing put back: the scan stopped at the young one

    run_tx(tmp_path, scenario, transaction_time_out=HOUR_MS)


def test_check_immunity_property_delays_the_check(tmp_path: Path) -> None:
    async def scenario(broker: BrokerController, tx: TxWire) -> None:
        await tx.heartbeat()
        await tx.prepare("TxTopic", b"immune", props={"CHECK_IMMUNITY_TIME_IN_SECONDS": "3600"})
        await tx.prepare("TxTopic", b"due")
        assert await checker(broker).check_once() == 1
        assert bytes((await tx.next_check()).message.body) == b"due"
        assert await checker(broker).check_once() == 1  # the immune one does not hold up the others
        assert bytes((await tx.next_check()).message.body) == b"due"

    run_tx(tmp_path, scenario)


def test_unanswered_half_message_is_discarded_after_check_max(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario(broker: BrokerController, tx: TxWire) -> None:
        await tx.heartbeat()
        half = await tx.prepare("TxTopic", b"abandoned")
        for times in (1, 2):
            assert await checker(broker).check_once() == 1
            assert (await tx.next_check()).message.properties["TRANSACTION_CHECK_TIMES"] == str(times)
        with caplog.at_level(logging.WARNING, "sparkmq.broker.transactions"):
            assert await checker(broker).check_once() == 0
        assert "discarded to TRANS_CHECK_MAX_TIME_TOPIC" in caplog.text and half.uniq_key in caplog.text
        (parked,) = await tx.read(DISCARDED, 0)
        assert bytes(parked.body) == b"abandoned" and parked.properties["REAL_TOPIC"] == "TxTopic"
        assert await checker(broker).check_once() == 0 and tx.checks.empty()
        assert await tx.read("TxTopic", 1) == []
        assert broker.context is not None and broker.context.topics.get(DISCARDED) is not None

    run_tx(tmp_path, scenario, transaction_check_max=2)


def test_one_bad_half_message_does_not_stop_the_check(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    async def scenario(broker: BrokerController, tx: TxWire) -> None:
        await tx.heartbeat()
        assert broker.store is not None
        bad = encode_properties(
            {"REAL_TOPIC": "TxTopic", "REAL_QID": "not-a-number", "PGROUP": GROUP, "UNIQ_KEY": "BAD"}
        )
        result, _ = broker.store.submit_messages(MessageBatch(HALF, 0, [b"bad"], [bad], born_timestamp=1))
        assert result.ok
        await tx.prepare("TxTopic", b"good")
        with caplog.at_level(logging.ERROR, "sparkmq.broker.transactions"):
            assert await checker(broker).check_once() == 1
        assert "could not be checked; skipped" in caplog.text
        assert bytes((await tx.next_check()).message.body) == b"good"

    run_tx(tmp_path, scenario)


def test_the_sending_connection_is_asked_before_any_heartbeat(tmp_path: Path) -> None:
    async def scenario(broker: BrokerController, tx: TxWire) -> None:
        await tx.prepare("TxTopic", b"early")  # C++ clients may send long before their first heartbeat
        assert await checker(broker).check_once() == 1
        check = await tx.next_check()
        await tx.end_ok(check.half, COMMIT, from_check=True)
        assert bodies(await tx.read("TxTopic", 1)) == [b"early"]

    run_tx(tmp_path, scenario)


def test_no_live_producer_means_asking_again_next_round(tmp_path: Path) -> None:
    async def scenario(broker: BrokerController, tx: TxWire) -> None:
        async with TxWire(tx.address, GROUP) as gone:
            await gone.prepare("TxTopic", b"orphan")

        async def closed_seen() -> None:  # the broker has seen the producer's connection close
            while broker.context is not None and broker.context.clients.producers.get(GROUP):
                await asyncio.sleep(0.01)

        await asyncio.wait_for(closed_seen(), 10)
        assert await checker(broker).check_once() == 1 and tx.checks.empty()  # counted, asked nobody
        await tx.heartbeat()
        assert await checker(broker).check_once() == 1
        check = await tx.next_check()
        assert check.message.properties["TRANSACTION_CHECK_TIMES"] == "2"
        await tx.end_ok(check.half, COMMIT, from_check=True)
        assert bodies(await tx.read("TxTopic", 1)) == [b"orphan"]

    run_tx(tmp_path, scenario)


def commit_without_op(tmp_path: Path, body: bytes) -> Half:
    """The crash window between END's two appends, on a broker run and stopped: a half message whose commit is
    in the store and whose op is not."""
    halves: list[Half] = []

    async def crash_after_commit(broker: BrokerController, tx: TxWire) -> None:
        half = await tx.prepare("TxTopic", body)
        (stored,) = await tx.read(HALF, 0)
        assert broker.store is not None and broker.store.submit_messages(committed_message(stored))[0].ok
        halves.append(half)

    run_tx(tmp_path, crash_after_commit)
    return halves[0]


def test_a_commit_stored_without_its_op_is_found_and_not_asked_about(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    half = commit_without_op(tmp_path, b"half-done")

    async def after_restart(broker: BrokerController, tx: TxWire) -> None:
        await tx.heartbeat()
        with caplog.at_level(logging.WARNING, "sparkmq.broker.transactions"):
            assert await checker(broker).check_once() == 0
        assert "had no op record" in caplog.text and tx.checks.empty()
        assert bodies(await tx.read(OP, 0)) == [b"0"]
        assert "already ended" in await tx.end_ok(half, COMMIT)
        assert bodies(await tx.read("TxTopic", 1)) == [b"half-done"]

    run_tx(tmp_path, after_restart)


def test_an_end_again_after_a_commit_stored_without_its_op_does_not_commit_twice(tmp_path: Path) -> None:
    """The producer's END tried again (the first one's answer lost in a failover) on a store that holds the
    commit but not its op, before any check-back: the op is written, the message is there once."""
    half = commit_without_op(tmp_path, b"committed-once")

    async def end_again(broker: BrokerController, tx: TxWire) -> None:
        assert await tx.end_ok(half, COMMIT) == ""
        assert bodies(await tx.read("TxTopic", 1)) == [b"committed-once"]
        assert bodies(await tx.read(OP, 0)) == [b"0"]
        assert "already ended" in await tx.end_ok(half, COMMIT)

    run_tx(tmp_path, end_again)


def test_wire_shape_of_check_and_of_a_cpp_end(tmp_path: Path) -> None:
    """CHECK_TRANSACTION_STATE with Java's header fields; END as C++ 1.2.x writes it."""

    async def scenario(broker: BrokerController, tx: TxWire) -> None:
        await tx.prepare("TxTopic", b"wire", queue_id=2)
        assert await checker(broker).check_once() == 1
        check = await tx.next_check()
        assert check.raw.code == 39 and check.raw.is_oneway and check.raw.language.name == "JAVA"
        assert check.raw.ext_fields == {
            "tranStateTableOffset": str(check.half.queue_offset),
            "commitLogOffset": str(check.half.commit_log_offset),
            "msgId": check.message.properties["UNIQ_KEY"],
            "transactionId": check.message.properties["UNIQ_KEY"],
            "offsetMsgId": check.message.offset_msg_id,
        }
        assert (check.message.topic, check.message.queue_id, check.message.store_host.port) == (
            "TxTopic",
            2,
            broker.config.listen_port,
        )
        cpp_end = {
            "producerGroup": GROUP,
            "tranStateTableOffset": str(check.half.queue_offset),
            "commitLogOffset": str(check.half.commit_log_offset),
            "commitOrRollback": "8",
            "fromTransactionCheck": "1",
            "msgId": check.half.uniq_key,
            "transactionId": check.half.uniq_key,
        }
        response = await tx.raw(37, cpp_end)
        assert response.code == ResponseCode.SUCCESS, response
        assert bodies(await tx.read("TxTopic", 2)) == [b"wire"]

    run_tx(tmp_path, scenario)


# --- restarts of a real broker process ------------------------------------------------------------

PROCESS_SETTINGS = ("--set", "transactionCheckInterval=1000", "--set", "transactionTimeOut=0")


def _in_loop(address: str, body: Callable[[TxWire], Awaitable[Any]]) -> Any:
    async def main() -> Any:
        async with TxWire(address, GROUP) as tx:
            return await body(tx)

    return asyncio.run(main())


@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "sigkill"])
def test_restart_between_prepare_and_commit_loses_nothing(tmp_path: Path, crash: bool) -> None:
    store = tmp_path / "store"
    quiet = ("--set", f"transactionCheckInterval={HOUR_MS}")
    with BrokerProcess.start(store, None, *quiet) as broker:
        half = _in_loop(broker.address, lambda tx: tx.prepare("TxTopic", b"survivor"))
        broker.kill() if crash else broker.stop()
    with BrokerProcess.start(store, None, *quiet, port=broker.port) as broker:

        async def commit(tx: TxWire) -> list[bytes]:
            assert await tx.read("TxTopic", 1) == []
            await tx.end_ok(half, COMMIT)
            return bodies(await tx.read("TxTopic", 1))

        assert _in_loop(broker.address, commit) == [b"survivor"]


@pytest.mark.parametrize("crash", [False, True], ids=["sigterm", "sigkill"])
def test_restart_between_commit_and_check_neither_commits_twice_nor_asks(tmp_path: Path, crash: bool) -> None:
    store = tmp_path / "store"
    quiet = ("--set", f"transactionCheckInterval={HOUR_MS}")
    with BrokerProcess.start(store, None, *quiet) as broker:

        async def decide(tx: TxWire) -> Half:
            committed = await tx.prepare("TxTopic", b"committed")
            rolled_back = await tx.prepare("TxTopic", b"rolled-back")
            await tx.end_ok(committed, COMMIT)
            await tx.end_ok(rolled_back, ROLLBACK)
            return committed

        committed = _in_loop(broker.address, decide)
        broker.kill() if crash else broker.stop()
    with BrokerProcess.start(store, None, *PROCESS_SETTINGS, port=broker.port) as broker:

        async def after(tx: TxWire) -> None:
            await tx.heartbeat()
            assert "already ended" in await tx.end_ok(committed, COMMIT)
            await tx.prepare("TxTopic", b"marker")  # scanned after the two decided ones
            check = await tx.next_check()
            assert bytes(check.message.body) == b"marker"  # the first question is about the marker
            await tx.end_ok(check.half, ROLLBACK, from_check=True)
            assert bodies(await tx.read("TxTopic", 1)) == [b"committed"]

        _in_loop(broker.address, after)


def test_restart_between_prepare_and_check_asks_the_producer(tmp_path: Path) -> None:
    store = tmp_path / "store"
    with BrokerProcess.start(store, None, "--set", f"transactionCheckInterval={HOUR_MS}") as broker:
        _in_loop(broker.address, lambda tx: tx.prepare("TxTopic", b"in-doubt"))
    with BrokerProcess.start(store, None, *PROCESS_SETTINGS, port=broker.port) as broker:

        async def answer(tx: TxWire) -> list[bytes]:
            await tx.heartbeat()
            check = await tx.next_check()
            await tx.end_ok(check.half, COMMIT, from_check=True)
            return bodies(await tx.read("TxTopic", 1))

        assert _in_loop(broker.address, answer) == [b"in-doubt"]


def test_broker_conf_keys() -> None:
    config = BrokerConfig.from_properties(
        {"transactionCheckInterval": "1000", "transactionTimeOut": "250", "transactionCheckMax": "3"}
    )
    assert (config.transaction_check_interval, config.transaction_time_out, config.transaction_check_max) == (
        1000,
        250,
        3,
    )
    defaults = BrokerConfig()
    assert (defaults.transaction_check_interval, defaults.transaction_time_out, defaults.transaction_check_max) == (
        60_000,
        6000,
        15,
    )
    with pytest.raises(ConfigError, match="transactionCheckInterval 0 must be positive"):
        TransactionService(SimpleNamespace(config=BrokerConfig(transaction_check_interval=0)))
