"""Drive the real RocketMQ 5 Python client (PyPI rocketmq-python-client 5.1.2) for tests/grpc.

Runs in ``.venv-rocketmq5`` (``make rocketmq5-venv``); prints one JSON line per event.

    rmq5_client.py produce  ENDPOINT TOPIC COUNT [--tag T] [--group-key G] [--delay-ms D] [--prefix P]
                             [--prop K=V ...]
    rmq5_client.py receive  ENDPOINT TOPIC GROUP COUNT [--invisible S] [--no-ack] [--ack-first K]
                             [--change-to S] [--timeout S] [--sql EXPR] [--hold-first-of G]
    rmq5_client.py push     ENDPOINT TOPIC GROUP COUNT [--fail-first K] [--hold-s S] [--timeout S]
    rmq5_client.py transact ENDPOINT TOPIC [--timeout S]
    (each takes --ak AK --sk SK for an ACL-enabled broker)
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time

from rocketmq import (
    ClientConfiguration,
    ConsumeResult,
    Credentials,
    FilterExpression,
    Message,
    MessageListener,
    Producer,
    PushConsumer,
    SimpleConsumer,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import FilterType

_OUT = threading.Lock()


def emit(event: str, **fields: object) -> None:
    line = json.dumps({"event": event, **fields}) + "\n"
    with _OUT:  # the push consumer's listener runs on many threads
        sys.stdout.write(line)
        sys.stdout.flush()


def received(message: Message, **extra: object) -> dict[str, object]:
    return {
        "id": message.message_id,
        "body": message.body.decode(),
        "attempt": message.delivery_attempt,
        "tag": message.tag,
        "group_key": message.message_group,
        "topic": message.topic,
        **extra,
    }


def produce(args: argparse.Namespace, config: ClientConfiguration) -> None:
    producer = Producer(config, (args.topic,))
    producer.startup()
    try:
        for i in range(args.count):
            message = Message()
            message.topic = args.topic
            message.body = f"{args.prefix}{i}".encode()
            if args.tag:
                message.tag = args.tag
            if args.group_key:
                keys = args.group_key.split(",")
                message.message_group = keys[i % len(keys)]
            asked_at = time.time()
            if args.delay_ms:
                message.delivery_timestamp = int(asked_at * 1000) + args.delay_ms
            for key, _, value in (prop.partition("=") for prop in args.prop):
                message.add_property(key, value.format(i=i))
            receipt = producer.send(message)
            emit("sent", id=receipt.message_id, body=f"{args.prefix}{i}", asked_at=asked_at, sent_at=time.time())
    finally:
        producer.shutdown()


def receive(args: argparse.Namespace, config: ClientConfiguration) -> None:
    expression = FilterExpression(args.sql, FilterType.SQL) if args.sql else FilterExpression()
    consumer = SimpleConsumer(config, args.group, {args.topic: expression}, await_duration=2)
    consumer.startup()
    got = 0
    deadline = time.monotonic() + args.timeout
    try:
        while got < args.count and time.monotonic() < deadline:
            for message in consumer.receive(16, args.invisible):
                got += 1
                emit("received", **received(message, at=time.time()))
                if args.hold_first_of and message.message_group == args.hold_first_of:
                    args.hold_first_of = ""
                    continue  # left to expire: its message group's next message waits for it
                if args.change_to:
                    consumer.change_invisible_duration(message, args.change_to)
                    emit("changed", id=message.message_id)
                elif not args.no_ack and (args.ack_first < 0 or got <= args.ack_first):
                    consumer.ack(message)
                    emit("acked", id=message.message_id)
    finally:
        consumer.shutdown()
    emit("done", count=got)


class Listener(MessageListener):
    def __init__(self, fail_first: int, hold_s: float) -> None:
        self.fail_first = fail_first
        self.hold_s = hold_s
        self.seen: dict[str, int] = {}
        self.lock = threading.Lock()
        self.ok = 0

    def consume(self, message: Message) -> ConsumeResult:
        with self.lock:
            n = self.seen[message.message_id] = self.seen.get(message.message_id, 0) + 1
            fail = n <= self.fail_first
            if not fail:
                self.ok += 1
        emit("received", **received(message, failed=fail))
        time.sleep(self.hold_s)  # the work a slow consumer does, longer than the invisible time
        return ConsumeResult.FAILURE if fail else ConsumeResult.SUCCESS


def push(args: argparse.Namespace, config: ClientConfiguration) -> None:
    listener = Listener(args.fail_first, args.hold_s)
    consumer = PushConsumer(config, args.group, listener, {args.topic: FilterExpression()})
    consumer.startup()
    deadline = time.monotonic() + args.timeout
    try:
        while listener.ok < args.count and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        consumer.shutdown()
    emit("done", count=listener.ok)


class CommitOrphans(TransactionChecker):
    def __init__(self) -> None:
        self.checked = threading.Event()

    def check(self, message: Message) -> TransactionResolution:
        emit("checked", id=message.message_id, body=message.body.decode())
        self.checked.set()
        return TransactionResolution.COMMIT


def transact(args: argparse.Namespace, config: ClientConfiguration) -> None:
    """Three half messages: one committed, one rolled back, one left for the broker's check (committed there);
    runs until a line on stdin."""
    checker = CommitOrphans()
    producer = Producer(config, (args.topic,), checker)
    producer.startup()
    try:
        for body in ("commit", "rollback", "orphan"):
            transaction = producer.begin_transaction()
            message = Message()
            message.topic = args.topic
            message.body = body.encode()
            receipt = producer.send(message, transaction)
            emit("sent", id=receipt.message_id, body=body)
            if body == "commit":
                transaction.commit()
            elif body == "rollback":
                transaction.rollback()
        checker.checked.wait(args.timeout)
        emit("waiting")
        sys.stdin.readline()  # the test says "stop" once it has seen the outcome
    finally:
        producer.shutdown()
    emit("done", checked=checker.checked.is_set())


def main() -> None:
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("produce")
    p.add_argument("endpoint")
    p.add_argument("topic")
    p.add_argument("count", type=int)
    p.add_argument("--tag", default="")
    p.add_argument("--group-key", default="", help="the message group; K1,K2,... in turn")
    p.add_argument("--delay-ms", type=int, default=0)
    p.add_argument("--prefix", default="m")
    p.add_argument("--prop", action="append", default=[], help="a user property K=V, {i} the message's number")
    for name in ("receive", "push"):
        r = sub.add_parser(name)
        r.add_argument("endpoint")
        r.add_argument("topic")
        r.add_argument("group")
        r.add_argument("count", type=int)
        r.add_argument("--timeout", type=float, default=30.0)
    r = sub.choices["receive"]
    r.add_argument("--invisible", type=int, default=20)
    r.add_argument("--no-ack", action="store_true")
    r.add_argument("--ack-first", type=int, default=-1, help="ack only the first K messages received")
    r.add_argument("--change-to", type=int, default=0)
    r.add_argument("--sql", default="", help="a SQL92 filter instead of all tags")
    r.add_argument("--hold-first-of", default="", help="leave the first message received of this message group unacked")
    sub.choices["push"].add_argument("--fail-first", type=int, default=0)
    sub.choices["push"].add_argument("--hold-s", type=float, default=0.0)
    t = sub.add_parser("transact")
    t.add_argument("endpoint")
    t.add_argument("topic")
    t.add_argument("--timeout", type=float, default=30.0)
    for command in sub.choices.values():
        command.add_argument("--ak", default="", help="ACL access key")
        command.add_argument("--sk", default="", help="ACL secret key")
    args = parser.parse_args()
    config = ClientConfiguration(args.endpoint, Credentials(args.ak, args.sk), request_timeout=5)
    {"produce": produce, "receive": receive, "push": push, "transact": transact}[args.command](args, config)


if __name__ == "__main__":
    main()
