"""A slave's link takes the master's transfers however TCP cuts them: a scripted master streams a real
master's CommitLog (1000-byte runs that cut records and cross a 64 KiB segment end) first a byte per
write, then all the rest in one write. The slave's log ends byte-identical, its queues hold every record,
and each report it sends is the end of a whole record it appended (an acknowledgement means appended)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from sparkmq.broker.controller import BrokerController
from sparkmq.broker.ha.wire import REPORT, encode_transfer_header
from sparkmq.message.record import record_starts
from support.broker_wire import Wire
from tests.broker.ha.test_replication import UNTIL_S, commitlog_bytes, master_config, run, send_many, slave_config

SEGMENT = 64 * 1024
DRIBBLED = 3  # transfers sent a byte per write


def test_a_slave_takes_transfers_cut_anywhere_and_acknowledges_only_whole_records(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with BrokerController(master_config(tmp_path, mapped_file_size_commit_log=SEGMENT)) as master:
            wire = Wire(master)
            try:
                await send_many(wire, "HaTopic", 200, size=500)
            finally:
                await wire.close()
            log = commitlog_bytes(master, 0)
            assert len(log) > SEGMENT
            stream: list[bytes] = []
            offset = 0
            while run_bytes := master.store.read_commitlog(offset, 1000):
                stream.append(encode_transfer_header(offset, len(run_bytes)) + run_bytes)
                offset += len(run_bytes)
        linked: asyncio.Future[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Future()
        server = await asyncio.start_server(lambda r, w: linked.set_result((r, w)), "127.0.0.1", 0)
        address = f"127.0.0.1:{server.sockets[0].getsockname()[1]}"
        config = slave_config(tmp_path, master, ha_master_address=address, mapped_file_size_commit_log=SEGMENT)
        try:
            async with BrokerController(config) as slave:
                reader, writer = await asyncio.wait_for(linked, UNTIL_S)
                assert REPORT.unpack(await reader.readexactly(REPORT.size)) == (0,)
                for byte in b"".join(stream[:DRIBBLED]):
                    writer.write(bytes([byte]))
                    await writer.drain()
                writer.write(b"".join(stream[DRIBBLED:]))
                reports = []
                while not reports or reports[-1] < len(log):
                    (report,) = REPORT.unpack(await asyncio.wait_for(reader.readexactly(REPORT.size), UNTIL_S))
                    reports.append(report)
                writer.close()
                assert reports == sorted(reports)
                assert set(reports) <= {*record_starts(log).tolist(), len(log)}
                assert commitlog_bytes(slave, 0) == log
                assert [slave.store.max_offset_in_queue("HaTopic", q) for q in (0, 1)] == [100, 100]
        finally:
            server.close()

    run(scenario())
