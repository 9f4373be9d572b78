"""Ordered messages end to end: ``select_by_hash`` sends, an orderly PushConsumer, a member joining mid-stream.

Ten keys × 1,000 messages, each key sent in order by its own thread with ``select_by_hash``; an
orderly consumer starts first and a second joins while the producers are running. An orderly
queue moves only after its owner finished the message in hand, persisted its offset and released
the broker lock; the new owner locks it and starts at the committed offset. So, per queue, the
global sequence of consumed offsets is one run per owner, each run consecutive, and a run starts
right after the previous one ended (or at its last message again, if that one's offset could not
be recorded) — per key, messages are consumed in send order across the move.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from itertools import pairwise

from sparkmq.client import Message, ReceivedMessage, SendResult, push_consumer, select_by_hash
from support.client_harness import Inbox, Receipt, topic_queues, wait_for

KEYS = 10
PER_KEY = 1000
QUEUES = 8


def send_key(producer, topic: str, key: str, results: list[SendResult], errors: list[BaseException]) -> None:
    try:
        for seq in range(PER_KEY):
            results.append(
                producer.send(
                    Message(topic, f"{key}:{seq}".encode(), keys=key, properties={"seq": str(seq)}),
                    selector=select_by_hash,
                    arg=key,
                )
            )
    except BaseException as exc:  # reported by the test thread
        errors.append(exc)


def runs(receipts: list[Receipt]) -> list[tuple[str, list[int]]]:
    """Consecutive receipts by the same consumer, as (consumer, offsets)."""
    out: list[tuple[str, list[int]]] = []
    for receipt in sorted(receipts, key=lambda r: r.seq):
        if not out or out[-1][0] != receipt.consumer:
            out.append((receipt.consumer, []))
        out[-1][1].append(receipt.message.queue_offset)
    return out


def test_orderly_consumers_keep_each_keys_order_when_a_member_joins_mid_stream(
    cluster, clients, group, monkeypatch
) -> None:
    # No periodic rebalance during the test: queues move only on NOTIFY_CONSUMER_IDS_CHANGED.
    monkeypatch.setattr(push_consumer, "REBALANCE_INTERVAL_S", 3600.0)
    topic = cluster.topic(queues=QUEUES)
    inbox = Inbox()

    def slow(message: ReceivedMessage) -> None:
        time.sleep(0.0002)  # keeps a message in hand now and then when a queue moves

    first = clients.push(group, cluster.ns, topic, inbox.listener("c1", slow), orderly=True)
    wait_for(lambda: len(topic_queues(first, topic)) == QUEUES, 10, "the first member to lock all queues")
    producer = clients.producer("PID_orderly", cluster.ns)
    results: dict[str, list[SendResult]] = {f"key-{k}": [] for k in range(KEYS)}
    errors: list[BaseException] = []
    senders = [
        threading.Thread(target=send_key, args=(producer, topic, key, sent, errors), daemon=True)
        for key, sent in results.items()
    ]
    for sender in senders:
        sender.start()
    wait_for(lambda: sum(map(len, results.values())) >= KEYS * PER_KEY // 4, 20, "a quarter of the messages sent")
    second = clients.push(group, cluster.ns, topic, inbox.listener("c2", slow), orderly=True)
    joined_at = sum(map(len, results.values()))
    for sender in senders:
        sender.join(60)
    assert not errors, errors
    wait_for(lambda: topic_queues(first, topic) and topic_queues(second, topic), 10, "both members to hold queues")
    inbox.wait_distinct(KEYS * PER_KEY, 60, topic)
    time.sleep(0.5)
    held = topic_queues(first, topic), topic_queues(second, topic)
    assert not held[0] & held[1] and len(held[0] | held[1]) == QUEUES
    assert joined_at < KEYS * PER_KEY * 0.9, "the second member joined after nearly everything was sent"

    # Each key stayed on one queue, in send order.
    for key, sent in results.items():
        assert len({r.queue for r in sent}) == 1, key
        assert [r.queue_offset for r in sent] == sorted(r.queue_offset for r in sent)
    # Per key: each member saw increasing sequence numbers; globally the sequence never went back,
    # except that a moved queue's new owner may repeat the one message the old owner had in hand.
    per_key: dict[str, list[Receipt]] = defaultdict(list)
    for receipt in inbox.snapshot(topic=topic):
        per_key[receipt.message.keys[0]].append(receipt)
    moved_keys = 0
    for key, receipts in per_key.items():
        receipts.sort(key=lambda r: r.seq)
        seqs = [int(r.message.properties["seq"]) for r in receipts]
        assert sorted(set(seqs)) == list(range(PER_KEY)), f"{key} lost messages"
        for member in ("c1", "c2"):
            own = [int(r.message.properties["seq"]) for r in receipts if r.consumer == member]
            assert own == sorted(set(own)), f"{key} out of order at {member}"
        assert all(b >= a for a, b in pairwise(seqs)), f"{key} went back: order violated across members"
        moved_keys += len({r.consumer for r in receipts}) > 1
    assert moved_keys > 0, "no key's queue moved to the new member"
    # Per queue: one run per owner, each consecutive; a run starts after the previous one's last
    # offset or repeats it (the one message in hand at the move whose offset was not recorded).
    repeats = 0
    for queue, receipts in inbox.by_queue(topic).items():
        previous_end = -1
        for member, offsets in runs(receipts):
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), (
                f"{queue} at {member}: not consecutive"
            )
            assert offsets[0] in (previous_end, previous_end + 1), (
                f"{queue}: {member} started at {offsets[0]} after {previous_end}"
            )
            repeats += offsets[0] == previous_end
            previous_end = offsets[-1]
        assert previous_end == max(r.queue_offset for r in results_for(results, queue))
    assert repeats <= QUEUES


def results_for(results: dict[str, list[SendResult]], queue) -> list[SendResult]:
    return [r for sent in results.values() for r in sent if r.queue == queue]
