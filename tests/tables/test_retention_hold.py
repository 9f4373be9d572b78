"""Retention never deletes CommitLog segments a table-enabled topic's table has not taken yet."""

from __future__ import annotations

import asyncio
from pathlib import Path

from support.broker_wire import Wire
from support.table_wire import caught_up, rows, table_broker, until, update_topic

BODY = b"x" * 10_000  # 1 MiB CommitLog segments: about a hundred records each


def test_retention_holds_what_the_table_lacks_and_reports_it_then_deletes_once_taken(tmp_path: Path) -> None:
    blocker = tmp_path / "tables"
    blocker.write_text("the root cannot be written while this file is here")

    async def scenario(w: Wire) -> None:
        store = w.broker.store
        assert store is not None
        await update_topic(w, "orders", "+table.enable=true")
        for _ in range(350):
            await w.send_ok("orders", BODY)
        await until(w, "orders", lambda s: s.state == "stalled")
        segments = len(store.commitlog.queue.files)
        assert segments >= 4
        report = await asyncio.to_thread(store.retention.run, None, True)  # forced: as a full disk forces it
        assert report.deleted_segments == 0 and store.retention.held_segments == segments - 1
        assert store.min_offset_in_queue("orders", 0) == 0
        blocker.unlink()
        await until(w, "orders", lambda s: caught_up(s) and sum(q.max_offset for q in s.queues) == 350)
        report = await asyncio.to_thread(store.retention.run, None, True)
        assert report.deleted_segments > 0 and store.retention.held_segments == 0

    table_broker(tmp_path, scenario)
    assert [r["queueOffset"] for r in rows(tmp_path / "tables" / "orders", ["queueId", "queueOffset"])] == list(
        range(350)
    )
