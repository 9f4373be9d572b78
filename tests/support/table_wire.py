"""An in-process broker writing tables under ``tmp_path / "tables"`` and the waits its tests make.

>>> # table_broker(tmp_path, scenario); await until(w, "T", caught_up)
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from deltalake import DeltaTable

from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.table_bodies import TableStatusBody
from sparkmq.store.config import FlushDiskType
from support.broker_wire import Wire, run_broker

DEADLINE_S = 30.0


def table_broker(tmp_path: Path, scenario: Any, **overrides: Any) -> None:
    run_broker(
        tmp_path / "store",
        scenario,
        table_topic_root=str(tmp_path / "tables"),
        table_topic_commit_interval_ms=50,
        flush_disk_type=FlushDiskType.SYNC_FLUSH,
        **overrides,
    )


async def update_topic(w: Wire, topic: str, attributes: str | None, queues: int = 2) -> None:
    fields = {
        "topic": topic,
        "defaultTopic": "TBW102",
        "readQueueNums": str(queues),
        "writeQueueNums": str(queues),
        "perm": "6",
        "topicFilterType": "SINGLE_TAG",
        "order": "false",
    }
    if attributes is not None:
        fields["attributes"] = attributes
    response = await w.call(RequestCode.UPDATE_AND_CREATE_TOPIC, fields)
    assert response.code == ResponseCode.SUCCESS, response.remark


async def status(w: Wire, topic: str) -> TableStatusBody:
    response = await w.call(RequestCode.SPARKMQ_TABLE_STATUS, {"topic": topic})
    assert response.code == ResponseCode.SUCCESS, response.remark
    return TableStatusBody.decode(response.body)


async def until(w: Wire, topic: str, predicate: Any) -> TableStatusBody:
    """Poll the table's status until ``predicate(status)`` holds (fails past the deadline)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + DEADLINE_S
    while True:
        current = await status(w, topic)
        if predicate(current):
            return current
        assert loop.time() < deadline, current
        await asyncio.sleep(0.02)


def caught_up(current: TableStatusBody) -> bool:
    return current.state == "ok" and bool(current.queues) and all(q.lag_messages == 0 for q in current.queues)


def rows(path: Path, columns: list[str] | None = None) -> list[dict[str, Any]]:
    table = DeltaTable(str(path)).to_pyarrow_table(columns=columns)
    return sorted(table.to_pylist(), key=lambda r: (r["queueId"], r["queueOffset"]))
