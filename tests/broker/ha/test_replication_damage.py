"""Replicated bytes damaged in flight (a TCP relay between slave and master flips one byte of a
record's body, once): the slave refuses the run, reports it (its log and ``sparkmq_store_damaged_total``
kind ``replica``), asks again from its own end, and its CommitLog stays a byte-identical prefix of the
master's, then catches up. And the checks themselves (``store.replica.whole_records``) on runs that
cut records, on fillers and on lengths no segment holds."""

from __future__ import annotations

import asyncio
import logging
from pathlib import Path

import pytest

from sparkmq.broker.controller import BrokerController
from sparkmq.broker.ha.wire import TRANSFER_HEADER, decode_transfer_header
from sparkmq.message import layout as L
from sparkmq.message.record import blank_filler, record_starts
from sparkmq.store.replica import ReplicaDamage, whole_records
from support.broker_wire import Wire
from tests.broker.ha.test_replication import commitlog_bytes, in_sync, master_config, send_many, slave_config, until


class FlippingRelay:
    """Forwards slave <-> master; in the master's first transfer that holds CommitLog offset ``target``,
    flips that byte (once, on the first link)."""

    def __init__(self, master: str, target: int) -> None:
        self.master_host, _, port = master.rpartition(":")
        self.master_port = int(port)
        self.target = target
        self.flipped = False
        self.links = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _accept(self, slave_reader: asyncio.StreamReader, slave_writer: asyncio.StreamWriter) -> None:
        self.links += 1
        master_reader, master_writer = await asyncio.open_connection(self.master_host, self.master_port)
        pipes = [
            asyncio.create_task(self._copy(slave_reader, master_writer)),
            asyncio.create_task(self._transfers(master_reader, slave_writer)),
        ]
        self._tasks.update(pipes)
        try:
            await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in pipes:
                task.cancel()
            master_writer.transport.abort()
            slave_writer.transport.abort()

    @staticmethod
    async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()

    async def _transfers(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            header = await reader.readexactly(TRANSFER_HEADER.size)
            offset, size = decode_transfer_header(header)
            body = bytearray(await reader.readexactly(size))
            if not self.flipped and offset <= self.target < offset + size:
                body[self.target - offset] ^= 0x5A
                self.flipped = True
            writer.write(header + bytes(body))
            await writer.drain()


def test_a_run_damaged_in_flight_is_refused_and_the_slave_stays_a_prefix_then_catches_up(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with BrokerController(master_config(tmp_path, ha_transfer_batch_size=1000)) as master:
            wire = Wire(master)
            relay: FlippingRelay | None = None
            try:
                await send_many(wire, "HaTopic", 60, size=300)
                log = commitlog_bytes(master)
                thirtieth = int(record_starts(log)[30])
                relay = FlippingRelay(master.config.ha_address, thirtieth + L.POS_BODY + 100)
                address = await relay.start()
                async with BrokerController(slave_config(tmp_path, master, ha_master_address=address)) as slave:
                    store = slave.store
                    assert store is not None
                    await until(lambda: store.damage.counts().get(("replica", "refused")) == 1, "the refusal")
                    assert log.startswith(commitlog_bytes(slave))
                    assert store.commitlog.max_offset <= thirtieth
                    await until(in_sync(master, slave), "the slave to catch up from its own end")
                    await send_many(wire, "HaTopic", 20, start=60, size=300)
                    await until(in_sync(master, slave), "the slave to follow new sends")
                    assert commitlog_bytes(slave) == commitlog_bytes(master)
                    assert store.max_offset_in_queue("HaTopic", 0) + store.max_offset_in_queue("HaTopic", 1) == 80
                    assert store.damage.counts() == {("replica", "refused"): 1}
                    assert relay.flipped and relay.links >= 2
            finally:
                if relay is not None:
                    await relay.close()
                await wire.close()

    with caplog.at_level(logging.WARNING):
        asyncio.run(scenario())
    assert any("damaged replica at CommitLog offset" in r.getMessage() for r in caplog.records)


def _records(tmp_path: Path) -> bytes:
    async def scenario() -> bytes:
        async with BrokerController(master_config(tmp_path)) as master:
            wire = Wire(master)
            try:
                await send_many(wire, "HaTopic", 5, size=200)
            finally:
                await wire.close()
            return commitlog_bytes(master)

    return asyncio.run(scenario())


def test_whole_records_takes_whole_records_and_holds_a_cut_one(tmp_path: Path) -> None:
    log = _records(tmp_path)
    starts = record_starts(log).tolist()
    assert whole_records(log, 0, 1 << 20) == len(log)
    for cut in range(0, len(log), 37):
        assert whole_records(log[:cut], 0, 1 << 20) == max(s for s in [*starts, len(log)] if s <= cut)
    # a filler to the segment's end, whole or cut by a run
    segment = len(log) + 64
    assert whole_records(log + blank_filler(64) + bytes(56), 0, segment) == segment
    assert whole_records(log + blank_filler(64), 0, segment) == len(log)
    assert whole_records(log + blank_filler(5)[:5], 0, len(log) + 5) == len(log) + 5


@pytest.mark.parametrize(
    ("at", "data", "why"),
    [
        (L.POS_BODY + 3, b"#", "body CRC"),
        (0, (1 << 30).to_bytes(4, "big"), "segment's end"),
        (0, (-5).to_bytes(4, "big", signed=True), "size -5"),
        (L.POS_MAGIC, b"\0\0\0\0", "magic 0x0"),
        (L.POS_PHYSICAL_OFFSET + 7, b"\x09", "offset"),
    ],
    ids=["body-crc", "size-past-segment", "negative-size", "magic", "own-offset"],
)
def test_whole_records_refuses_damage_and_trusts_no_length(tmp_path: Path, at: int, data: bytes, why: str) -> None:
    log = bytearray(_records(tmp_path))
    second = int(record_starts(bytes(log))[1])
    log[second + at : second + at + len(data)] = data
    with pytest.raises(ReplicaDamage, match=why) as refused:
        whole_records(bytes(log), 0, 1 << 20)
    assert refused.value.offset == second
