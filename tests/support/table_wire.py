"""An in-process broker writing tables under ``tmp_path / "tables"`` and the waits its tests make.

>>> # table_broker(tmp_path, scenario); await until(w, "T", caught_up)
"""

from __future__ import annotations

import asyncio
import urllib.request
from pathlib import Path
from typing import Any

from deltalake import DeltaTable
from prometheus_client.parser import text_string_to_metric_families

from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.table_bodies import TableStatusBody
from sparkmq.store.config import FlushDiskType
from support.broker_wire import Wire, run_broker

DEADLINE_S = 30.0


def table_broker(tmp_path: Path, scenario: Any, **overrides: Any) -> None:
    settings = {
        "table_topic_root": str(tmp_path / "tables"),
        "table_topic_commit_interval_ms": 50,
        "flush_disk_type": FlushDiskType.SYNC_FLUSH,
        **overrides,
    }
    run_broker(tmp_path / "store", scenario, **settings)


PROM = {"metrics_exporter_type": "PROM", "metrics_prom_exporter_host": "127.0.0.1", "metrics_prom_exporter_port": 0}


async def stalled_metric(w: Wire, topic: str) -> tuple[float, str]:
    """``sparkmq_table_stalled`` of ``topic`` and its reason label (a broker started with ``**PROM``)."""
    assert w.broker.metrics is not None
    url = f"http://{w.broker.metrics.address}/metrics"
    text = await asyncio.to_thread(lambda: urllib.request.urlopen(url, timeout=5).read().decode())
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "sparkmq_table_stalled" and sample.labels.get("topic") == topic:
                return sample.value, sample.labels.get("reason", "")
    raise AssertionError(f"no sparkmq_table_stalled sample of {topic}")


def topic_fields(topic: str, attributes: str | None, queues: int = 2) -> dict[str, str]:
    """UPDATE_AND_CREATE_TOPIC's header fields for ``topic`` (``attributes``: RocketMQ 5's ``+key=value`` list)."""
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
    return fields


async def update_topic(w: Wire, topic: str, attributes: str | None, queues: int = 2) -> None:
    response = await w.call(RequestCode.UPDATE_AND_CREATE_TOPIC, topic_fields(topic, attributes, queues))
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


def rows(
    path: Path | str, columns: list[str] | None = None, storage_options: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    table = DeltaTable(str(path), storage_options=storage_options).to_pyarrow_table(columns=columns)
    return sorted(table.to_pylist(), key=lambda r: (r["queueId"], r["queueOffset"]))


async def send_numbered(w: Wire, topic: str, first: int, count: int) -> None:
    """Bodies ``m-<i>`` for i in [first, first + count), alternating between queues 0 and 1."""
    for i in range(first, first + count):
        await w.send_ok(topic, f"m-{i}".encode(), queue_id=i % 2)


def stalled(reason: str) -> Any:
    return lambda s: s.state == "stalled" and reason in s.reason


def complete(total: int) -> Any:
    return lambda s: caught_up(s) and sum(q.max_offset for q in s.queues) == total


def assert_exactly(path: Path | str, total: int, storage_options: dict[str, str] | None = None) -> None:
    """The table holds ``m-0`` .. ``m-<total - 1>``, each once."""
    found = rows(path, ["queueId", "queueOffset", "body"], storage_options)
    keys = [(r["queueId"], r["queueOffset"]) for r in found]
    assert len(keys) == len(set(keys)) == total
    assert sorted(r["body"] for r in found) == sorted(f"m-{i}".encode() for i in range(total))
