"""The measuring side of bench/grpc_client_bench.py, run in .venv-rocketmq5 (rocketmq-python-client 5.1.2).

Sends one message (retried until the topic's route is served), then COUNT messages one by one
(Producer.send), then receives them all in batches of 32 with a SimpleConsumer and acks each; prints
one JSON line of figures (latencies in µs). ``--held N``: then N more received and held, acked at the end.
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from rocketmq import ClientConfiguration, Credentials, FilterExpression, Message, Producer, SimpleConsumer


def pct(values: list[float], p: float) -> float:
    s = sorted(values)
    return s[max(0, min(len(s) - 1, round(p / 100.0 * len(s) + 0.5) - 1))] if s else 0.0


def hold_then_ack(
    producer: Producer, consumer: SimpleConsumer, topic: str, body: bytes, count: int
) -> tuple[list[Any], float]:
    """Send ``count`` more, receive them all without acking (each invisible for 10 min), then ack them all:
    the messages received and the seconds the acks took."""
    for _ in range(count):
        message = Message()
        message.topic, message.body = topic, body
        producer.send(message)
    held: list[Any] = []
    deadline = time.monotonic() + 300
    while len(held) < count and time.monotonic() < deadline:
        held += consumer.receive(32, 600)
    started = time.perf_counter()
    for message in held:
        consumer.ack(message)
    return held, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("endpoint")
    parser.add_argument("topic")
    parser.add_argument("group")
    parser.add_argument("--count", type=int, default=2000)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--held", type=int, default=0, help="then: receive this many more, ack them all at the end")
    args = parser.parse_args()
    config = ClientConfiguration(args.endpoint, Credentials(), request_timeout=10)
    producer = Producer(config, (args.topic,))
    producer.startup()
    body = b"x" * args.size
    first = Message()
    first.topic, first.body = args.topic, body
    ready_by = time.monotonic() + 60
    while True:  # a topic just created reaches Apache's NameServer, hence its proxy's route, a moment later
        try:
            producer.send(first)
            break
        except Exception:  # noqa: BLE001 - the client raises a bare Exception for a missing route
            if time.monotonic() > ready_by:
                raise
            time.sleep(0.2)
    send_us: list[float] = []
    started = time.perf_counter()
    for _ in range(args.count):
        message = Message()
        message.topic, message.body = args.topic, body
        t0 = time.perf_counter()
        producer.send(message)
        send_us.append((time.perf_counter() - t0) * 1e6)
    send_s = time.perf_counter() - started
    consumer = SimpleConsumer(config, args.group, {args.topic: FilterExpression()}, await_duration=2)
    consumer.startup()
    ack_us: list[float] = []
    got = 0
    started = time.perf_counter()
    deadline = time.monotonic() + 300
    while got <= args.count and time.monotonic() < deadline:
        try:
            batch = consumer.receive(32, 60)
        except Exception:  # noqa: BLE001 - Apache's proxy refuses receives until the client's settings reached it
            if got:
                raise
            time.sleep(0.05)
            continue
        for message in batch:
            t0 = time.perf_counter()
            consumer.ack(message)
            ack_us.append((time.perf_counter() - t0) * 1e6)
            got += 1
    receive_s = time.perf_counter() - started
    held, held_ack_s = hold_then_ack(producer, consumer, args.topic, body, args.held)
    producer.shutdown()
    consumer.shutdown()
    figures = {
        "sent": args.count + 1,
        "send_per_s": args.count / send_s,
        "send_p50_us": pct(send_us, 50),
        "send_p99_us": pct(send_us, 99),
        "received": got,
        "receive_ack_per_s": got / receive_s,
        "ack_p50_us": pct(ack_us, 50),
        "ack_p99_us": pct(ack_us, 99),
        "held": len(held),
        "held_ack_per_s": len(held) / held_ack_s if held else 0.0,
    }
    print(json.dumps(figures), flush=True)


if __name__ == "__main__":
    main()
