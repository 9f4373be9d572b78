"""Source offsets: ``{topic: {"broker:queueId": offset}}`` JSON with canonical (sorted) keys.

Spark compares offsets as JSON strings, so the same offsets must always serialise the
same way: dicts are built sorted and hold only ints.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from sparkmq.protocol.bodies import MessageQueue

QueueOffsets = dict[MessageQueue, int]


def queue_key(queue: MessageQueue) -> str:
    return f"{queue.broker_name}:{queue.queue_id}"


def to_json_offsets(offsets: Mapping[MessageQueue, int]) -> dict[str, dict[str, int]]:
    """The canonical offset dict of ``offsets`` (topics and queue keys sorted)."""
    nested: dict[str, dict[str, int]] = {}
    for queue in sorted(offsets, key=lambda q: (q.topic, q.broker_name, q.queue_id)):
        nested.setdefault(queue.topic, {})[queue_key(queue)] = int(offsets[queue])
    return {topic: dict(sorted(queues.items())) for topic, queues in sorted(nested.items())}


def from_json_offsets(offsets: Mapping[str, Mapping[str, int]]) -> QueueOffsets:
    result: QueueOffsets = {}
    for topic, queues in offsets.items():
        for key, offset in queues.items():
            broker, _, queue_id = key.rpartition(":")
            result[MessageQueue(topic, broker, int(queue_id))] = int(offset)
    return result


def rate_limit(start: Mapping[MessageQueue, int], latest: Mapping[MessageQueue, int], max_total: int) -> QueueOffsets:
    """Split ``max_total`` new offsets over queues in proportion to their backlog, exactly ``max_total``
    when the backlog is larger (the shares' fractions go to the largest ones first, as largest-remainder
    rounding does), so a backlog of k × ``max_total`` takes k micro-batches, not k + 1 with a sliver.

    A queue with any backlog gets at least one offset while there are at least as many offsets as
    such queues, as in Spark's Kafka source, so small queues are never starved.
    """
    backlog = {q: max(latest[q] - start.get(q, latest[q]), 0) for q in latest}
    total = sum(backlog.values())
    if total <= max_total:
        return dict(latest)
    waiting = sorted((q for q in latest if backlog[q] > 0), key=lambda q: (q.topic, q.broker_name, q.queue_id))
    take = dict.fromkeys(waiting, 0)
    if len(waiting) <= max_total:  # one offset each first: no queue starves
        take = dict.fromkeys(waiting, 1)
    budget, rest = max_total - sum(take.values()), total - sum(take.values())
    shares = {q: (backlog[q] - take[q]) * budget / rest for q in waiting}
    for queue in waiting:
        take[queue] += math.floor(shares[queue])
    left = max_total - sum(take.values())  # fewer than len(waiting): one more each, largest fraction first
    for queue in sorted(waiting, key=lambda q: math.floor(shares[q]) - shares[q])[:left]:
        take[queue] += 1
    return {q: end if q not in take else start[q] + take[q] for q, end in latest.items()}
