"""Issue 15: no background loop dies from one failing round, and close persists what it can.

One policy (``sparkmq.remoting.periodic``): a failing round is logged with its traceback and the
next round runs. The faults are injected into real persistence rounds of a real broker (an
``OSError`` from a table write), a real registration round and a real NameServer scan; each test
waits on an event for the round after the failure.
"""

from __future__ import annotations

import asyncio
import errno
import json
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sparkmq.broker.controller import BrokerController
from sparkmq.errors import RemoteError
from sparkmq.namesrv import NameServer
from sparkmq.namesrv.config import NamesrvConfig
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.remoting.periodic import run_every, stop_tasks
from support.broker_wire import Wire, small_config

TIMEOUT_S = 10.0


def failing_once(
    real: Callable[..., Any], loop: asyncio.AbstractEventLoop, done: asyncio.Event, error: BaseException
) -> Callable[..., Any]:
    """``real`` that raises ``error`` on its first call and sets ``done`` (thread-safely) after the second."""
    calls = 0

    def wrapper(*args: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise error
        result = real(*args)
        loop.call_soon_threadsafe(done.set)
        return result

    return wrapper


def failures(caplog: pytest.LogCaptureFixture, kind: type[BaseException]) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.exc_info and isinstance(r.exc_info[1], kind)]


def test_run_every_logs_a_failing_round_with_its_traceback_and_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        done = asyncio.Event()
        rounds = 0

        def action() -> None:
            nonlocal rounds
            rounds += 1
            if rounds == 1:
                raise OSError(errno.EIO, "injected")
            done.set()

        task = asyncio.get_running_loop().create_task(run_every(0.001, action, "demo"))
        await asyncio.wait_for(done.wait(), TIMEOUT_S)
        await stop_tasks([task], "test")
        assert task.cancelled()

    asyncio.run(scenario())
    (record,) = failures(caplog, OSError)
    assert record.levelno == logging.ERROR and "demo" in record.getMessage()


def test_an_unreachable_peer_logs_one_warning_per_streak_and_its_recovery(caplog: pytest.LogCaptureFixture) -> None:
    """Connection refused every round is expected, not a bug: one line per streak, no traceback."""
    outcomes = ["refused", "refused", "refused", "ok", "refused", "ok", "broken"]

    async def scenario() -> None:
        done = asyncio.Event()

        def action() -> None:
            outcome = outcomes.pop(0) if outcomes else "ok"
            if not outcomes:
                done.set()
            if outcome == "refused":
                raise RemoteError("cannot connect to 127.0.0.1:1: refused", retriable=True)
            if outcome == "broken":
                raise RemoteError("the broker answered garbage")  # not retriable: a bug-class failure

        task = asyncio.get_running_loop().create_task(run_every(0.001, action, "demo"))
        await asyncio.wait_for(done.wait(), TIMEOUT_S)
        await stop_tasks([task], "test")

    with caplog.at_level(logging.DEBUG, logger="sparkmq.remoting.periodic"):
        asyncio.run(scenario())
    records = [r for r in caplog.records if r.name == "sparkmq.remoting.periodic"]
    warnings = [r for r in records if r.levelno == logging.WARNING]
    assert [("refused" in r.getMessage(), r.exc_info) for r in warnings] == [(True, None), (True, None)]
    recoveries = [r.getMessage() for r in records if r.levelno == logging.INFO]
    assert recoveries == [
        "background task demo succeeded again after 3 failed rounds",
        "background task demo succeeded again after 1 failed rounds",
    ]
    assert len([r for r in records if r.levelno == logging.DEBUG]) == 2
    (broken,) = failures(caplog, RemoteError)
    assert broken.levelno == logging.ERROR and "garbage" in str(broken.exc_info[1])


def test_an_oserror_in_an_offset_persistence_round_is_logged_and_the_next_round_persists(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with BrokerController(small_config(tmp_path, flush_consumer_offset_interval=20)) as broker:
            done = asyncio.Event()
            table = broker.persister._tables["consumerOffset.json"]
            table.write = failing_once(
                table.write, asyncio.get_running_loop(), done, OSError(errno.EIO, "injected EIO")
            )
            wire = Wire(broker)
            try:
                await wire.send_ok("Persisted", b"m")
                commit = {"consumerGroup": "CID_P", "topic": "Persisted", "queueId": "0", "commitOffset": "1"}
                assert (await wire.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)).code == ResponseCode.SUCCESS
                await asyncio.wait_for(done.wait(), TIMEOUT_S)
            finally:
                await wire.close()
            offsets = json.loads((tmp_path / "config" / "consumerOffset.json").read_text())["offsetTable"]
            assert offsets["Persisted@CID_P"] == {"0": 1}

    asyncio.run(scenario())
    (record,) = failures(caplog, OSError)
    assert "consumerOffset.json" in record.getMessage()


def test_close_persists_every_other_table_and_removes_the_abort_marker_when_one_write_fails(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        broker = BrokerController(small_config(tmp_path, flush_consumer_offset_interval=3_600_000))
        await broker.start()
        try:

            def broken(snapshot: Any) -> None:
                raise OSError(errno.ENOSPC, "injected ENOSPC")

            broker.persister._tables["topics.json"].write = broken
            wire = Wire(broker)
            sent = await wire.send("NewTopic", b"m")  # stored, but its new topic cannot reach topics.json
            assert sent.code == ResponseCode.SYSTEM_ERROR and "ENOSPC" in (sent.remark or ""), sent
            commit = {"consumerGroup": "CID_C", "topic": "NewTopic", "queueId": "0", "commitOffset": "1"}
            assert (await wire.call(RequestCode.UPDATE_CONSUMER_OFFSET, commit)).code == ResponseCode.SUCCESS
            assert (await wire.pull("CID_C", "NewTopic", 0, 0)).code == ResponseCode.SUCCESS
            await wire.close()
        finally:
            await broker.close()

    asyncio.run(scenario())
    config = tmp_path / "config"
    assert json.loads((config / "consumerOffset.json").read_text())["offsetTable"]["NewTopic@CID_C"] == {"0": 1}
    assert "CID_C" in json.loads((config / "subscriptionGroup.json").read_text())["subscriptionGroupTable"]
    assert not (tmp_path / "abort").exists()
    assert failures(caplog, OSError)
    assert any("topics.json could not be persisted" in r.getMessage() for r in caplog.records)


def test_a_registration_round_that_raises_does_not_end_registration(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with NameServer(NamesrvConfig("127.0.0.1", port=0)) as namesrv:
            config = small_config(tmp_path, namesrv_addr=namesrv.address, register_name_server_period=20)
            async with BrokerController(config) as broker:
                registration = broker._registration
                assert registration is not None
                done = asyncio.Event()
                registration.topics.wrapper = failing_once(
                    registration.topics.wrapper,
                    asyncio.get_running_loop(),
                    done,
                    UnicodeEncodeError("utf-8", "\ud800", 0, 1, "surrogates not allowed"),
                )
                await asyncio.wait_for(done.wait(), TIMEOUT_S)
                assert registration._task is not None and not registration._task.done()

    asyncio.run(scenario())
    assert failures(caplog, UnicodeEncodeError)


def test_a_failing_namesrv_scan_round_is_logged_and_the_scan_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    async def scenario() -> None:
        async with NameServer(NamesrvConfig("127.0.0.1", port=0, scan_interval_s=0.01)) as namesrv:
            done = asyncio.Event()
            namesrv.routes.evict_stale = failing_once(
                namesrv.routes.evict_stale, asyncio.get_running_loop(), done, RuntimeError("injected")
            )
            await asyncio.wait_for(done.wait(), TIMEOUT_S)

    asyncio.run(scenario())
    assert failures(caplog, RuntimeError)
