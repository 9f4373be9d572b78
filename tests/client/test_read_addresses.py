"""Where sparkmq's clients read a broker's queues: the suggested broker, the master, then slaves."""

from __future__ import annotations

from sparkmq.client.routes import TopicRoute
from sparkmq.protocol.bodies import BrokerData, QueueData, TopicRouteData


def route(addrs: dict[int, str]) -> TopicRoute:
    return TopicRoute("T", TopicRouteData((QueueData("b", 4, 4, 6),), (BrokerData("c", "b", addrs),)))


def test_master_first_then_slaves_by_id() -> None:
    assert route({2: "s2", 0: "m", 1: "s1"}).read_addresses("b") == ["m", "s1", "s2"]


def test_a_suggested_slave_comes_first_and_a_missing_one_falls_back() -> None:
    assert route({0: "m", 1: "s1"}).read_addresses("b", 1) == ["s1", "m"]
    assert route({0: "m"}).read_addresses("b", 1) == ["m"]


def test_without_a_master_the_slaves_serve() -> None:
    assert route({1: "s1"}).read_addresses("b") == ["s1"]
    assert route({1: "s1"}).read_addresses("other") == []
