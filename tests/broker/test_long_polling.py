"""Long polling over the wire: a parked pull wakes for every message that reaches its queue.

A pull that finds nothing parks (PullRequestHoldService); the store's dispatch wakes it. The
pull is answered by a coroutine that parks only once it runs, so a message dispatched in
between (the same read's send, served synchronously right after the pull was found empty)
must still wake it: otherwise the pull sleeps out its whole suspend timeout with the message
already in its queue.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from sparkmq.message.properties import encode_properties
from sparkmq.message.record import iter_records
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from support.broker_wire import Wire, one_write, run_broker

TOPIC = "TopicLongPoll"
SUSPEND_MS = 25_000  # the broker's cap: a missed wake-up answers only after this
ANSWER_WAIT_S = 15.0  # far above any answer's time, far below the suspend timeout


def _send(opaque: int, body: bytes) -> bytes:
    props = encode_properties({"TAGS": "T", "UNIQ_KEY": f"U{opaque:08d}", "WAIT": "true"})
    fields = {
        "a": "PID_LP",
        "b": TOPIC,
        "c": "TBW102",
        "d": "4",
        "e": "0",
        "f": "0",
        "g": str(int(time.time() * 1000)),
        "h": "0",
        "i": props.decode(),
        "j": "0",
        "k": "false",
        "m": "false",
    }
    return RemotingCommand.request(RequestCode.SEND_MESSAGE_V2, opaque, ext_fields=fields, body=body).encode()


def _suspending_pull(opaque: int, offset: int) -> bytes:
    fields = {
        "consumerGroup": "CID_LP",
        "topic": TOPIC,
        "queueId": "0",
        "queueOffset": str(offset),
        "maxMsgNums": "32",
        "sysFlag": "6",  # SUBSCRIPTION | SUSPEND
        "commitOffset": "0",
        "suspendTimeoutMillis": str(SUSPEND_MS),
        "subVersion": "0",
        "subscription": "*",
        "expressionType": "TAG",
    }
    return RemotingCommand.request(RequestCode.PULL_MESSAGE, opaque, ext_fields=fields).encode()


def test_a_send_right_behind_a_parking_pull_wakes_it(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await w.send_ok(TOPIC, b"first", queue_id=0)  # creates the topic; queue 0 holds offset 0
        port = w.broker.config.listen_port
        for offset in (1, 2, 3):  # each pull finds its queue empty and parks; the send behind it fills it
            body = f"message {offset}".encode()
            responses = await asyncio.wait_for(
                one_write(port, [_suspending_pull(1, offset), _send(2, body)]), ANSWER_WAIT_S
            )
            pulled, sent = responses[1], responses[2]
            assert sent.code == ResponseCode.SUCCESS, sent
            assert pulled.code == ResponseCode.SUCCESS, pulled
            records = list(iter_records(pulled.body, check_crc=True))
            assert [(r.queue_offset, r.body) for r in records] == [(offset, body)]
        assert w.broker.context.holds.parked == 0

    run_broker(tmp_path, scenario)
