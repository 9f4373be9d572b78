"""Queue allocation strategies: which of a topic's queues one member of a group reads.

A strategy is a function ``(client_id, queues, client_ids) -> queues``; every member computes its
share from the same inputs, so the shares partition the queues. Each one gives Java's
``AllocateMessageQueueStrategy`` of the same name the same answer for the same inputs (Java's
``RebalanceImpl`` sorts the queues and the client ids first; these sort them themselves). Empty
inputs, or a ``client_id`` not among ``client_ids``, give an empty share (Java throws for the former).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Callable, Iterable, Sequence

from sparkmq.errors import ConfigError
from sparkmq.protocol.bodies import MessageQueue

AllocateStrategy = Callable[[str, Sequence[MessageQueue], Sequence[str]], list[MessageQueue]]
DEFAULT_VIRTUAL_NODES = 10  # AllocateMessageQueueConsistentHash()


def _queue_key(queue: MessageQueue) -> tuple[str, str, int]:
    return queue.topic, queue.broker_name, queue.queue_id


def _sorted_inputs(
    client_id: str, queues: Sequence[MessageQueue], client_ids: Sequence[str]
) -> tuple[list[MessageQueue], list[str], int]:
    all_queues = sorted(queues, key=_queue_key)
    all_ids = sorted(set(client_ids))
    return all_queues, all_ids, all_ids.index(client_id) if client_id in all_ids else -1


def allocate_averagely(client_id: str, queues: Sequence[MessageQueue], client_ids: Sequence[str]) -> list[MessageQueue]:
    """Contiguous ranges, the first ``len(queues) % len(ids)`` members taking one more (Java's ``AVG``).

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
    """Every ``len(ids)``-th queue starting at this member's index (Java's ``AVG_BY_CIRCLE``).

    >>> qs = [MessageQueue("T", "b", i) for i in range(5)]
    >>> [q.queue_id for q in allocate_averagely_by_circle("c1", qs, ["c1", "c2"])]
    [0, 2, 4]
    """
    all_queues, all_ids, index = _sorted_inputs(client_id, queues, client_ids)
    if index < 0:
        return []
    return all_queues[index :: len(all_ids)]


def allocate_by_config(queues: Iterable[MessageQueue]) -> AllocateStrategy:
    """Always ``queues``, whatever the group looks like (Java's ``AllocateMessageQueueByConfig``, ``CONFIG``).

    >>> pinned = allocate_by_config([MessageQueue("T", "b", 3)])
    >>> [q.queue_id for q in pinned("c1", [MessageQueue("T", "b", i) for i in range(4)], ["c1", "c2"])]
    [3]
    """
    fixed = list(queues)

    def allocate(client_id: str, queues: Sequence[MessageQueue], client_ids: Sequence[str]) -> list[MessageQueue]:
        return list(fixed)

    return allocate


def _java_split_at(name: str) -> list[str]:
    """``name.split("@")`` as Java's ``String.split`` does it: trailing empty parts dropped."""
    parts = name.split("@")
    while parts and not parts[-1]:
        parts.pop()
    return parts


def allocate_by_machine_room(consumer_rooms: Iterable[str]) -> AllocateStrategy:
    """The queues of brokers named ``ROOM@name`` with ROOM in ``consumer_rooms``, split averagely.

    Java's ``AllocateMessageQueueByMachineRoom`` (``MACHINE_ROOM``): each member takes
    ``len(queues) // len(ids)`` contiguous queues and the first ``len(queues) % len(ids)`` one
    more from the tail; queues of other brokers go to nobody.

    >>> rooms = allocate_by_machine_room({"hz"})
    >>> qs = [MessageQueue("T", b, i) for b in ("hz@b1", "sh@b2") for i in range(3)]
    >>> [(q.broker_name, q.queue_id) for q in rooms("c1", qs, ["c1", "c2"])]
    [('hz@b1', 0), ('hz@b1', 2)]
    """
    rooms = frozenset(consumer_rooms)

    def allocate(client_id: str, queues: Sequence[MessageQueue], client_ids: Sequence[str]) -> list[MessageQueue]:
        all_queues, all_ids, index = _sorted_inputs(client_id, queues, client_ids)
        if index < 0:
            return []
        picked = [q for q in all_queues if len(parts := _java_split_at(q.broker_name)) == 2 and parts[0] in rooms]
        each, rest = divmod(len(picked), len(all_ids))
        share = picked[each * index : each * index + each]
        if rest > index:
            share.append(picked[index + each * len(all_ids)])
        return share

    return allocate


def _named_room(room: str, of: object) -> str:
    if not room:
        raise ConfigError(f"machine room is empty for {of}")
    return room


def allocate_machine_room_nearby(
    strategy: AllocateStrategy | str,
    broker_room: Callable[[MessageQueue], str],
    consumer_room: Callable[[str], str],
) -> AllocateStrategy:
    """``strategy`` within each machine room first, then rooms with no live member shared by all.

    Java's ``AllocateMachineRoomNearby`` (``MACHINE_ROOM_NEARBY-<inner>``): ``broker_room`` and
    ``consumer_room`` are its ``MachineRoomResolver``; an empty room raises :class:`ConfigError`.

    >>> nearby = allocate_machine_room_nearby("AVG", lambda q: q.broker_name[:2], lambda c: c[:2])
    >>> qs = [MessageQueue("T", b, i) for b in ("hz-b1", "sh-b2") for i in range(2)]
    >>> [(q.broker_name, q.queue_id) for q in nearby("hz-c1", qs, ["hz-c1", "hz-c2"])]
    [('hz-b1', 0), ('sh-b2', 0)]
    """
    inner = strategy_named(strategy)

    def allocate(client_id: str, queues: Sequence[MessageQueue], client_ids: Sequence[str]) -> list[MessageQueue]:
        all_queues, all_ids, index = _sorted_inputs(client_id, queues, client_ids)
        if index < 0 or not all_queues:
            return []
        queues_by_room: dict[str, list[MessageQueue]] = {}
        for queue in all_queues:
            queues_by_room.setdefault(_named_room(broker_room(queue), queue), []).append(queue)
        ids_by_room: dict[str, list[str]] = {}
        for cid in all_ids:
            ids_by_room.setdefault(_named_room(consumer_room(cid), cid), []).append(cid)
        home = consumer_room(client_id)
        share = inner(client_id, queues_by_room.pop(home, []), ids_by_room.get(home, []))
        for room in sorted(queues_by_room):
            if room not in ids_by_room:
                share.extend(inner(client_id, queues_by_room[room], all_ids))
        return share

    return allocate


def md5_hash(key: str) -> int:
    """``ConsistentHashRouter.MD5Hash``: the first 4 bytes of the MD5 of ``key``'s UTF-8, big-endian.

    >>> md5_hash("c1-0")
    3886541579
    """
    return int.from_bytes(hashlib.md5(key.encode()).digest()[:4], "big")


def _java_queue_string(queue: MessageQueue) -> str:
    return f"MessageQueue [topic={queue.topic}, brokerName={queue.broker_name}, queueId={queue.queue_id}]"


def allocate_consistent_hash(
    virtual_nodes: int = DEFAULT_VIRTUAL_NODES, hash_function: Callable[[str], int] = md5_hash
) -> AllocateStrategy:
    """Each queue to the member owning the next point of a hash ring (Java's ``CONSISTENT_HASH``).

    Every member puts ``virtual_nodes`` points ``hash("<client id>-<i>")`` on the ring (a later
    member's point replaces an equal one); a queue goes to the first point at or after
    ``hash(str(queue))`` in Java's ``MessageQueue.toString`` form, wrapping around. Few queues move
    when a member joins or leaves.
    """
    if virtual_nodes < 0:
        raise ConfigError(f"virtual_nodes must be at least 0, not {virtual_nodes}")

    def allocate(client_id: str, queues: Sequence[MessageQueue], client_ids: Sequence[str]) -> list[MessageQueue]:
        all_queues, all_ids, index = _sorted_inputs(client_id, queues, client_ids)
        if index < 0 or not all_queues or not virtual_nodes:
            return []
        ring: dict[int, str] = {}
        for cid in all_ids:
            for replica in range(virtual_nodes):
                ring[hash_function(f"{cid}-{replica}")] = cid
        points = sorted(ring)
        share = []
        for queue in all_queues:
            at = bisect.bisect_left(points, hash_function(_java_queue_string(queue)))
            if ring[points[at % len(points)]] == client_id:
                share.append(queue)
        return share

    return allocate


STRATEGIES: dict[str, AllocateStrategy] = {
    "AVG": allocate_averagely,
    "AVG_BY_CIRCLE": allocate_averagely_by_circle,
    "CONSISTENT_HASH": allocate_consistent_hash(),
}


def strategy_named(strategy: AllocateStrategy | str) -> AllocateStrategy:
    """``strategy`` itself, or the one of Java's names that need no settings (``AVG``, ``AVG_BY_CIRCLE``,
    ``CONSISTENT_HASH``); an unknown name raises :class:`ConfigError`."""
    if callable(strategy):
        return strategy
    found = STRATEGIES.get(strategy)
    if found is None:
        raise ConfigError(f"unknown allocate strategy {strategy!r}: one of {sorted(STRATEGIES)} or a function")
    return found
