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
    """Split ``max_total`` new offsets over queues in proportion to their backlog.

    A queue with any backlog gets at least one offset (``ceil`` of a share below one), as in
    Spark's Kafka source, so small queues are never starved; the total may overshoot by at
    most the number of queues.
    """
    backlog = {q: max(latest[q] - start.get(q, latest[q]), 0) for q in latest}
    total = sum(backlog.values())
    if total <= max_total:
        return dict(latest)
    limited: QueueOffsets = {}
    for queue, end in latest.items():
        begin = start.get(queue, end)
        share = backlog[queue] * max_total / total
        take = math.ceil(share) if share < 1 else math.floor(share)
        limited[queue] = min(begin + take, end)
    overshoot = sum(limited[q] - start.get(q, limited[q]) for q in limited) - max_total
    for floor in (1, 0):  # trim the largest takes first; down to zero only if there are more queues than rows
        for queue in sorted(limited, key=lambda q: limited[q] - start.get(q, limited[q]), reverse=True):
            if overshoot <= 0:
                return limited
            taken = limited[queue] - start.get(queue, limited[queue])
            trim = min(overshoot, max(taken - floor, 0))
            limited[queue] -= trim
            overshoot -= trim
    return limited
