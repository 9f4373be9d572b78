"""An admin's resetOffsetByTime reaches a running push consumer (RESET_CONSUMER_CLIENT_OFFSET): it
drops what it cached, starts again from the new offsets, and new messages still arrive once."""

from __future__ import annotations

import asyncio
from collections import Counter

from sparkmq.client.admin_ext import AdminExt
from sparkmq.protocol.bodies import MessageQueue
from support.client_harness import Inbox, message, wait_for


def test_reset_to_the_start_makes_a_running_push_consumer_read_again(cluster, clients, group) -> None:
    topic = cluster.topic(queues=2)
    inbox = Inbox()
    clients.push(group, cluster.ns, topic, inbox.listener("c1"))
    producer = clients.producer("PID_reset", cluster.ns)
    for i in range(10):
        producer.send(message(topic, i))
    wait_for(lambda: len(inbox.snapshot()) == 10, 30, "the first delivery of 10 messages")

    async def reset() -> dict[MessageQueue, int]:
        async with AdminExt(cluster.ns) as admin:
            return await admin.reset_offset_by_time(group, topic, 0, force=True)

    table = asyncio.run(reset())
    assert sorted(table.values()) == [0, 0]
    wait_for(lambda: len(inbox.snapshot()) == 20, 30, "the 10 messages again after the reset")
    for i in range(10, 12):
        producer.send(message(topic, i))
    wait_for(lambda: len(inbox.snapshot()) == 22, 30, "the 2 new messages")

    seen = Counter(r.message.properties["seq"] for r in inbox.snapshot())
    assert seen == Counter({**{str(i): 2 for i in range(10)}, "10": 1, "11": 1})
    rounds = inbox.snapshot()
    assert {r.where for r in rounds[10:20]} == {r.where for r in rounds[:10]}  # the same queue offsets again
