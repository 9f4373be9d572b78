"""A broker that stops answering heartbeats is one WARNING line per outage, not one per round.

Real NameServer and broker processes: a producer learns the broker's route, the broker stops, three
heartbeat rounds fail (one WARNING, then DEBUG), the broker comes back on the same port and store,
and the next round logs at INFO how many rounds had failed.
"""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from sparkmq.client import AsyncProducer
from support.client_harness import create_topic, message, wait_for_route
from support.processes import BrokerProcess, NamesrvProcess


def _lines(caplog: pytest.LogCaptureFixture, address: str) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records if address in r.getMessage()]


def test_heartbeat_failures_are_logged_once_per_outage(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    with NamesrvProcess.start() as namesrv:
        brokers = [BrokerProcess.start(tmp_path / "store", namesrv.address)]  # the first, then its return
        try:
            create_topic([brokers[0].address], "HeartbeatLog", 1)
            wait_for_route(namesrv.address, "HeartbeatLog", {"broker-a"})
            asyncio.run(_outage_and_return(namesrv, brokers, tmp_path, caplog))
        finally:
            for broker in brokers:
                broker.stop()


async def _outage_and_return(
    namesrv: NamesrvProcess, brokers: list[BrokerProcess], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    broker = brokers[0]
    address, port = broker.address, broker.port
    producer = AsyncProducer("PID_heartbeat_log", namesrv.address)
    try:
        await producer.start()
        await producer.send(message("HeartbeatLog", 0))  # the route, so the broker's address
        broker.stop()
        with caplog.at_level(logging.DEBUG, logger="sparkmq.client.instance"):
            for _ in range(3):
                await producer.instance.heartbeat()
            failed = _lines(caplog, address)
            assert [level for level, _ in failed] == [logging.WARNING, logging.DEBUG, logging.DEBUG], failed
            assert all("heartbeat to" in text and "failed" in text for _, text in failed)
            caplog.clear()
            brokers.append(BrokerProcess.start(tmp_path / "store", namesrv.address, port=port))
            await producer.instance.heartbeat()
            assert _lines(caplog, address) == [
                (logging.INFO, f"heartbeat to {address} succeeded after 3 failed rounds")
            ]
    finally:
        await producer.close()
