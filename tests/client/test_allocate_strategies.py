"""The allocation strategies against rocketmq-client 4.9.7's own classes, and their partition properties.

The vectors come from running Java's strategies (``references/runner/AllocateVectors.java``, built by
``make references``) on random inputs; ours must answer the same for every member of every case.
"""

from __future__ import annotations

import json
import random
import subprocess
from collections import Counter
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sparkmq.client.rebalance import (
    AllocateStrategy,
    allocate_averagely,
    allocate_averagely_by_circle,
    allocate_by_config,
    allocate_by_machine_room,
    allocate_consistent_hash,
    allocate_machine_room_nearby,
    strategy_named,
)
from sparkmq.errors import ConfigError
from sparkmq.protocol.bodies import MessageQueue
from support.rocketmq_java import MAKE_TARGET, classpath, client_jvm, fail_or_skip, require_references

ROOMS = ("hz", "sh", "bj")
CASES_PER_STRATEGY = 60


def _random_case(rng: random.Random, strategy: str) -> dict[str, Any]:
    brokers = [f"{rng.choice(ROOMS)}@broker-{i}" if rng.random() < 0.8 else f"broker-{i}" for i in range(1, 4)]
    brokers = brokers[: rng.randint(1, 3)]
    queues = [
        [topic, broker, qid]
        for topic in ("T", "%RETRY%G")[: rng.randint(1, 2)]
        for broker in brokers
        for qid in range(rng.randint(1, 9))
    ]
    clients = [f"10.0.0.{rng.randint(1, 250)}@{rng.randint(1, 99999)}" for _ in range(rng.randint(1, 7))]
    case: dict[str, Any] = {"strategy": strategy, "queues": queues, "clients": sorted(set(clients))}
    if strategy == "CONFIG":
        case["config"] = rng.sample(queues, rng.randint(0, len(queues)))
    elif strategy == "MACHINE_ROOM":
        case["rooms"] = rng.sample(ROOMS, rng.randint(0, 3))
    elif strategy == "CONSISTENT_HASH":
        case["virtualNodes"] = rng.choice((0, 1, 3, 10, 50))
    elif strategy == "NEARBY_AVG":
        case["brokerRooms"] = {broker: rng.choice(ROOMS) for broker in brokers}
        case["clientRooms"] = {client: rng.choice(ROOMS) for client in case["clients"]}
    return case


def _ours(case: dict[str, Any]) -> AllocateStrategy:
    name = case["strategy"]
    if name == "CONFIG":
        return allocate_by_config(MessageQueue(*row) for row in case["config"])
    if name == "MACHINE_ROOM":
        return allocate_by_machine_room(case["rooms"])
    if name == "CONSISTENT_HASH":
        return allocate_consistent_hash(case["virtualNodes"])
    if name == "NEARBY_AVG":
        return allocate_machine_room_nearby(
            "AVG", lambda q: case["brokerRooms"][q.broker_name], lambda c: case["clientRooms"][c]
        )
    return strategy_named(name)


def _java_answers(cases: Sequence[dict[str, Any]], tmp_path) -> list[dict[str, list[list[Any]]]]:
    root = require_references("rocketmq", "runner")
    if not (root / "runner" / "classes" / "AllocateVectors.class").exists():
        fail_or_skip(f"the runner has no AllocateVectors: run `{MAKE_TARGET}` (it compiles references/runner)")
    done = subprocess.run(
        ["java", *client_jvm(tmp_path), "-cp", classpath("runner", "rocketmq"), "AllocateVectors"],
        input="".join(json.dumps(case) + "\n" for case in cases),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def test_every_strategy_allocates_as_rocketmq_client_does(tmp_path) -> None:
    rng = random.Random(35)
    names = ("AVG", "AVG_BY_CIRCLE", "CONFIG", "MACHINE_ROOM", "CONSISTENT_HASH", "NEARBY_AVG")
    cases = [_random_case(rng, name) for name in names for _ in range(CASES_PER_STRATEGY)]
    answers = _java_answers(cases, tmp_path)
    assert len(answers) == len(cases)
    for case, java in zip(cases, answers, strict=True):
        queues = [MessageQueue(*row) for row in case["queues"]]
        shuffled = rng.sample(queues, len(queues))
        strategy = _ours(case)
        ours = {
            client: [[q.topic, q.broker_name, q.queue_id] for q in strategy(client, shuffled, case["clients"][::-1])]
            for client in case["clients"]
        }
        assert ours == java, case


def _partition_strategies() -> dict[str, AllocateStrategy]:
    return {
        "AVG": allocate_averagely,
        "AVG_BY_CIRCLE": allocate_averagely_by_circle,
        "CONSISTENT_HASH": allocate_consistent_hash(),
        "CONSISTENT_HASH_1": allocate_consistent_hash(1),
        "NEARBY_CIRCLE": allocate_machine_room_nearby(
            allocate_averagely_by_circle, lambda q: q.broker_name[:1], lambda c: c[:1]
        ),
    }


group_inputs = st.tuples(
    st.sets(st.tuples(st.sampled_from("TU"), st.sampled_from(("a-1", "b-2", "c-3")), st.integers(0, 15)), min_size=1),
    st.sets(st.from_regex(r"[abc][0-9]{1,3}@[0-9]{1,5}", fullmatch=True), min_size=1, max_size=9),
    st.randoms(use_true_random=False),
)


@settings(max_examples=30, deadline=None)
@given(group_inputs)
def test_every_queue_goes_to_exactly_one_member_and_the_same_one_for_any_input_order(inputs) -> None:
    rows, clients, rng = inputs
    queues = [MessageQueue(*row) for row in rows]
    members = sorted(clients)
    for name, strategy in _partition_strategies().items():
        shares = {client: strategy(client, queues, members) for client in members}
        counts = Counter(q for share in shares.values() for q in share)
        assert set(counts) == set(queues), name
        assert set(counts.values()) == {1}, name
        again = {
            client: strategy(client, rng.sample(queues, len(queues)), rng.sample(members, len(members)))
            for client in members
        }
        assert again == shares, name
        assert strategy("not-a-member", queues, members) == []


@settings(max_examples=30, deadline=None)
@given(group_inputs, st.sets(st.sampled_from(("a", "b", "c")), max_size=3))
def test_by_machine_room_gives_the_rooms_queues_once_and_no_others(inputs, rooms) -> None:
    rows, clients, _ = inputs
    queues = [MessageQueue(topic, broker.replace("-", "@"), qid) for topic, broker, qid in rows]
    members = sorted(clients)
    strategy = allocate_by_machine_room(rooms)
    counts = Counter(q for client in members for q in strategy(client, queues, members))
    assert set(counts) == {q for q in queues if q.broker_name.split("@")[0] in rooms}
    assert set(counts.values()) <= {1}


def test_a_consumer_joining_moves_few_queues_under_consistent_hash() -> None:
    queues = [MessageQueue("T", f"broker-{b}", i) for b in range(4) for i in range(16)]
    members = [f"10.0.0.{i}@1" for i in range(1, 6)]
    strategy = allocate_consistent_hash(50)
    before = {q: c for c in members for q in strategy(c, queues, members)}
    after = {q: c for c in [*members, "10.0.0.9@1"] for q in strategy(c, queues, [*members, "10.0.0.9@1"])}
    moved = [q for q in queues if before[q] != after[q]]
    assert all(after[q] == "10.0.0.9@1" for q in moved)


def test_bad_strategy_settings_are_named() -> None:
    with pytest.raises(ConfigError, match="unknown allocate strategy 'AVERAGE'"):
        strategy_named("AVERAGE")
    with pytest.raises(ConfigError, match="virtual_nodes"):
        allocate_consistent_hash(-1)
    nearby = allocate_machine_room_nearby("AVG", lambda q: "", lambda c: "hz")
    with pytest.raises(ConfigError, match="machine room is empty"):
        nearby("c1", [MessageQueue("T", "b", 0)], ["c1"])
