"""Queue allocation strategies: which of a topic's queues one member of a group reads.

Both sort queues and client ids first, so every member computes the same split.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from sparkmq.protocol.bodies import MessageQueue

AllocateStrategy = Callable[[str, Sequence[MessageQueue], Sequence[str]], list[MessageQueue]]


def _sorted_inputs(
    client_id: str, queues: Sequence[MessageQueue], client_ids: Sequence[str]
) -> tuple[list[MessageQueue], list[str], int]:
    all_queues = sorted(queues, key=lambda q: (q.topic, q.broker_name, q.queue_id))
    all_ids = sorted(set(client_ids))
    return all_queues, all_ids, all_ids.index(client_id) if client_id in all_ids else -1


def allocate_averagely(client_id: str, queues: Sequence[MessageQueue], client_ids: Sequence[str]) -> list[MessageQueue]:
    """Contiguous ranges, the first ``len(queues) % len(ids)`` members taking one more.

    >>> qs = [MessageQueue("T", "b", i) for i in range(5)]
    >>> [q.queue_id for q in allocate_averagely("c1", qs, ["c1", "c2"])]
    [0, 1, 2]
    """
    all_queues, all_ids, index = _sorted_inputs(client_id, queues, client_ids)
    if index < 0 or not all_queues:
        return []
    count, members = len(all_queues), len(all_ids)
    mod = count % members
    size = 1 if count <= members else count // members + (1 if mod > 0 and index < mod else 0)
    start = index * size if mod > 0 and index < mod else index * size + mod
    return [all_queues[(start + i) % count] for i in range(max(0, min(size, count - start)))]


def allocate_averagely_by_circle(
    client_id: str, queues: Sequence[MessageQueue], client_ids: Sequence[str]
) -> list[MessageQueue]:
    """Every ``len(ids)``-th queue starting at this member's index.

    >>> qs = [MessageQueue("T", "b", i) for i in range(5)]
    >>> [q.queue_id for q in allocate_averagely_by_circle("c1", qs, ["c1", "c2"])]
    [0, 2, 4]
    """
    all_queues, all_ids, index = _sorted_inputs(client_id, queues, client_ids)
    if index < 0:
        return []
    return all_queues[index :: len(all_ids)]
