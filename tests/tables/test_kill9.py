"""Exactly once across ``kill -9``: a real broker process killed while it materializes, restarted, twice.

Senders keep sending through each crash; every acknowledged message must be in the table once, and
the table must hold each queue's offsets without a hole or a repeat.
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from deltalake import DeltaTable

from sparkmq.message.properties import encode_properties
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.admin_headers import CreateTopicRequestHeader, TopicRequestHeader
from sparkmq.protocol.table_bodies import TableStatusBody
from sparkmq.remoting import RemotingClient
from support.processes import BrokerProcess, wait_until

TOPIC, QUEUES = "orders", 4


class Senders:
    """Concurrent SEND_MESSAGE_V2s to one broker until it dies or ``stop``; the acknowledged ones by (queue, offset)."""

    def __init__(self, address: str, start: int) -> None:
        self.address, self.next = address, start
        self.acked: dict[tuple[int, int], bytes] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()))
        self._thread.start()

    async def _run(self) -> None:
        client = RemotingClient()
        try:
            await asyncio.gather(*(self._send(client, worker) for worker in range(8)))
        finally:
            await client.close()

    async def _send(self, client: RemotingClient, worker: int) -> None:
        while not self._stop.is_set():
            number = self.next
            self.next += 1
            body = f"message-{number}".encode()
            fields = {
                "a": "PID",
                "b": TOPIC,
                "c": "TBW102",
                "d": str(QUEUES),
                "e": str(number % QUEUES),
                "f": "0",
                "g": "1700000000000",
                "h": "0",
                "i": encode_properties({"KEYS": str(number)}).decode(),
            }
            try:
                response = await client.invoke(self.address, RequestCode.SEND_MESSAGE_V2, fields, body, timeout=5.0)
            except Exception:  # the broker was killed: this sender is done
                return
            if response.code == ResponseCode.SUCCESS:
                self.acked[(int(response.ext_fields["queueId"]), int(response.ext_fields["queueOffset"]))] = body

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


def _call(address: str, code: int, fields: dict[str, str]) -> tuple[int, str | None, bytes]:
    async def call() -> tuple[int, str | None, bytes]:
        client = RemotingClient()
        try:
            response = await client.invoke(address, code, fields, timeout=5.0)
            return response.code, response.remark, response.body
        finally:
            await client.close()

    return asyncio.run(call())


def _commits(table: Path) -> int:
    log = table / "_delta_log"
    return len(list(log.glob("*.json"))) if log.exists() else 0


def _broker(store: Path, root: Path) -> BrokerProcess:
    return BrokerProcess.start(
        store,
        None,
        "--set",
        f"tableTopicRoot={root}",
        "--set",
        "tableTopicCommitIntervalMs=100",
        "--set",
        "flushDiskType=SYNC_FLUSH",
    )


def test_kill_9_mid_materialization_leaves_no_duplicate_and_no_gap(tmp_path: Path) -> None:
    store, root = tmp_path / "store", tmp_path / "tables"
    table = root / TOPIC
    acked: dict[tuple[int, int], bytes] = {}
    number = 0
    broker = _broker(store, root)
    try:
        header = CreateTopicRequestHeader(
            TOPIC, "TBW102", QUEUES, QUEUES, 6, "SINGLE_TAG", False, 0, "+table.enable=true"
        )
        code, remark, _ = _call(broker.address, RequestCode.UPDATE_AND_CREATE_TOPIC, header.to_fields())
        assert code == ResponseCode.SUCCESS, remark
        for _ in range(2):
            senders = Senders(broker.address, number)
            seen = _commits(table)

            def committed(seen: int = seen, senders: Senders = senders) -> bool:
                return _commits(table) >= seen + 3 and len(senders.acked) > 200

            assert wait_until(committed, 60), "no commits"
            broker.kill()  # while the senders send and the writer writes
            senders.stop()
            acked.update(senders.acked)
            number = senders.next
            broker = _broker(store, root)
        status = TopicRequestHeader(TOPIC).to_fields()

        def caught_up() -> bool:
            code, _, body = _call(broker.address, RequestCode.SPARKMQ_TABLE_STATUS, status)
            if code != ResponseCode.SUCCESS:
                return False
            state = TableStatusBody.decode(body)
            return (
                state.state == "ok" and all(q.lag_messages == 0 for q in state.queues) and len(state.queues) == QUEUES
            )

        assert wait_until(caught_up, 60), "the table did not catch up after the restarts"
    finally:
        broker.stop()
    rows = DeltaTable(str(table)).to_pyarrow_table(columns=["queueId", "queueOffset", "body"]).to_pylist()
    keys = [(row["queueId"], row["queueOffset"]) for row in rows]
    assert len(keys) == len(set(keys)), "a message is in the table twice"
    by_key = {(row["queueId"], row["queueOffset"]): row["body"] for row in rows}
    for queue in range(QUEUES):
        offsets = sorted(offset for q, offset in by_key if q == queue)
        assert offsets == list(range(len(offsets))), f"queue {queue} has a hole"
    missing = [key for key in acked if key not in by_key]
    assert not missing, f"{len(missing)} acknowledged messages are not in the table, e.g. {missing[:3]}"
    assert all(by_key[key] == body for key, body in acked.items())
    assert len(acked) > 400
