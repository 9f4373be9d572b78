"""Long polling over the wire: a parked pull wakes for every message that reaches its queue.

A pull that finds nothing parks (PullRequestHoldService); the store's dispatch wakes it. The
pull is answered by a coroutine that parks only once it runs, so a message dispatched in
between (the same read's send, served synchronously right after the pull was found empty)
must still wake it: otherwise the pull sleeps out its whole suspend timeout with the message
already in its queue.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from sparkmq.message.record import iter_records
from sparkmq.protocol import ResponseCode
from support.broker_wire import Wire, one_write, pull_frame, run_broker, send_frame

TOPIC = "TopicLongPoll"
SUSPEND_MS = 25_000  # the broker's cap: a missed wake-up answers only after this
# sysFlag 6 below: SUBSCRIPTION | SUSPEND
ANSWER_WAIT_S = 15.0  # far above any answer's time, far below the suspend timeout


def test_a_send_right_behind_a_parking_pull_wakes_it(tmp_path: Path) -> None:
    async def scenario(w: Wire) -> None:
        await w.send_ok(TOPIC, b"first", queue_id=0)  # creates the topic; queue 0 holds offset 0
        port = w.broker.config.listen_port
        for offset in (1, 2, 3):  # each pull finds its queue empty and parks; the send behind it fills it
            body = f"message {offset}".encode()
            responses = await asyncio.wait_for(
                one_write(
                    port,
                    [
                        pull_frame(1, TOPIC, offset=offset, sys_flag=6, suspend_ms=SUSPEND_MS),
                        send_frame(2, body, TOPIC),
                    ],
                ),
                ANSWER_WAIT_S,
            )
            pulled, sent = responses[1], responses[2]
            assert sent.code == ResponseCode.SUCCESS, sent
            assert pulled.code == ResponseCode.SUCCESS, pulled
            records = list(iter_records(pulled.body, check_crc=True))
            assert [(r.queue_offset, r.body) for r in records] == [(offset, body)]
        assert w.broker.context.holds.parked == 0

    run_broker(tmp_path, scenario)
