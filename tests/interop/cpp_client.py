"""Drive the real C++ RocketMQ client (PyPI ``rocketmq`` 0.4.4) from the command line.

Runs under ``.venv-rocketmq/bin/python`` (never the project venv: it imports the wheel's
``rocketmq`` package). Each subcommand prints one JSON line per send result or received message
on stdout, then ``{"event": "done", ...}``, and exits. The test harness parses those lines.

    produce           send_sync COUNT messages (tags, keys, user properties); --keep-going past failures
    produce-orderly   send_orderly COUNT messages, key i % KEYS, selector arg = key number
    produce-batch     send_batch BATCHES batches of SIZE messages
    push-consume      PushConsumer until COUNT distinct messages arrived, a line on stdin, or the deadline
    pull-consume      PullConsumer.pull over every queue from offset 0 until COUNT messages

Example::

    .venv-rocketmq/bin/python tests/interop/cpp_client.py produce --namesrv 127.0.0.1:9876 \\
        --topic T --group PID_T --count 10
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from rocketmq.client import Message, MessageModel, Producer, PullConsumer, PushConsumer

PROPERTY_KEYS = ("color", "seq")


def emit(record: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
    sys.stdout.flush()


def shut_down(client: Any) -> None:
    """``client.shutdown()``, announced first: the library sometimes aborts inside it
    (boost::thread_interrupted, apache/rocketmq-client-cpp#204), after everything was recorded."""
    emit({"event": "shutdown"})
    client.shutdown()


def text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def build_message(topic: str, index: int, args: argparse.Namespace, key: str | None = None) -> Message:
    """Message ``index``: the test side rebuilds the same fields to compare (see test_cpp_client.py)."""
    message = Message(topic)
    message.set_tags(f"Tag{index % 3}")
    message.set_keys(key if key is not None else f"key-{index}")
    message.set_body(f"{args.prefix}-body-{index}" + "." * args.pad)  # text only: the wrapper sends C strings
    message.set_property("color", ("red", "green", "blue")[index % 3])
    message.set_property("seq", str(index))
    return message


def sent_record(kind: str, index: int, result: Any, **extra: Any) -> dict[str, Any]:
    return {
        "event": "sent",
        "kind": kind,
        "index": index,
        "status": int(result.status),
        "msg_id": result.msg_id,
        "offset": int(result.offset),
        **extra,
    }


def with_credentials(client: Any, args: argparse.Namespace) -> Any:
    """``--access-key``/``--secret-key``: ACL 1.0 credentials (channel LOCAL); unset, the library signs with ""."""
    if args.access_key is not None:
        client.set_session_credentials(args.access_key, args.secret_key, "LOCAL")
    return client


def start_producer(args: argparse.Namespace) -> Producer:
    producer = with_credentials(Producer(args.group), args)
    producer.set_namesrv_addr(args.namesrv)
    producer.start()
    return producer


def run_produce(args: argparse.Namespace) -> None:
    producer = start_producer(args)
    try:
        for index in range(args.count):
            try:
                result = producer.send_sync(build_message(args.topic, index, args))
            except Exception as exc:  # the library's MQClientException: no broker took it
                if not args.keep_going:
                    raise
                emit({"event": "failed", "index": index, "error": str(exc)})
                continue
            emit(sent_record("sync", index, result))
    finally:
        shut_down(producer)


def run_produce_orderly(args: argparse.Namespace) -> None:
    producer = start_producer(args)
    try:
        for index in range(args.count):
            key_number = index % args.keys
            message = build_message(args.topic, index, args, key=f"order-{key_number}")
            result = producer.send_orderly(message, key_number)
            emit(sent_record("orderly", index, result, key=f"order-{key_number}"))
    finally:
        shut_down(producer)


def run_produce_batch(args: argparse.Namespace) -> None:
    producer = start_producer(args)
    try:
        for batch in range(args.batches):
            first = batch * args.size
            messages = [build_message(args.topic, first + i, args) for i in range(args.size)]
            result = producer.send_batch(messages)
            emit(sent_record("batch", batch, result, first=first, size=args.size))
    finally:
        shut_down(producer)


def received_record(message: Any) -> dict[str, Any]:
    """Copy everything out of the message now: the C handle dies when the callback returns."""
    return {
        "event": "received",
        "id": text(message.id),
        "topic": text(message.topic),
        "tags": text(message.tags),
        "keys": text(message.keys),
        "body": text(message.body),
        "properties": {key: text(message.get_property(key)) for key in PROPERTY_KEYS},
        "queue_id": int(message.queue_id),
        "queue_offset": int(message.queue_offset),
        "reconsume_times": int(message.reconsume_times),
    }


def wait_for_stop_line(stop: threading.Event) -> None:
    """Any line on stdin, or its end, asks the consumer to shut down."""
    sys.stdin.readline()
    stop.set()


def run_push_consume(args: argparse.Namespace) -> None:
    model = MessageModel.BROADCASTING if args.broadcasting else MessageModel.CLUSTERING
    consumer = with_credentials(PushConsumer(args.group, message_model=model), args)
    consumer.set_namesrv_addr(args.namesrv)
    lock = threading.Lock()
    seen: set[str] = set()
    enough = threading.Event()

    def on_message(message: Any) -> None:
        record = received_record(message)
        with lock:
            emit(record)
            seen.add(f"{record['queue_id']}:{record['queue_offset']}")
            if args.count and len(seen) >= args.count:
                enough.set()

    consumer.subscribe(args.topic, on_message)
    consumer.start()
    emit({"event": "started"})
    if args.until_stdin:
        threading.Thread(target=wait_for_stop_line, args=(enough,), daemon=True).start()
    try:
        enough.wait(args.deadline)
        # Idle time lets duplicates (or messages beyond COUNT) show up before shutdown.
        time.sleep(args.linger)
    finally:
        shut_down(consumer)  # persists the consumed offsets (UPDATE_CONSUMER_OFFSET) first
    emit({"event": "done", "distinct": len(seen)})


def run_pull_consume(args: argparse.Namespace) -> None:
    consumer = with_credentials(PullConsumer(args.group), args)
    consumer.set_namesrv_addr(args.namesrv)
    consumer.start()
    count = 0
    deadline = time.monotonic() + args.deadline
    try:
        while count < args.count and time.monotonic() < deadline:
            for message in consumer.pull(args.topic):
                emit(received_record(message))
                count += 1
            if count < args.count:
                time.sleep(0.2)
    finally:
        shut_down(consumer)
    emit({"event": "done", "distinct": count})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    def command(name: str, run: Any) -> argparse.ArgumentParser:
        sub = commands.add_parser(name)
        sub.add_argument("--namesrv", required=True)
        sub.add_argument("--topic", required=True)
        sub.add_argument("--group", required=True)
        sub.add_argument("--access-key")
        sub.add_argument("--secret-key")
        sub.set_defaults(run=run)
        return sub

    for name, run in (("produce", run_produce), ("produce-orderly", run_produce_orderly)):
        sub = command(name, run)
        sub.add_argument("--count", type=int, required=True)
        sub.add_argument("--keys", type=int, default=4)
        sub.add_argument("--prefix", default="m")
        sub.add_argument("--pad", type=int, default=0, help="append this many dots to each body")
        if name == "produce":
            sub.add_argument("--keep-going", action="store_true", help="record a failed send and go on")
    batch = command("produce-batch", run_produce_batch)
    batch.add_argument("--batches", type=int, required=True)
    batch.add_argument("--size", type=int, required=True)
    batch.add_argument("--prefix", default="m")
    batch.add_argument("--pad", type=int, default=0, help="append this many dots to each body")
    push = command("push-consume", run_push_consume)
    push.add_argument("--count", type=int, default=0, help="stop after this many distinct messages (0: deadline)")
    push.add_argument("--deadline", type=float, default=60.0)
    push.add_argument("--linger", type=float, default=0.0)
    push.add_argument("--broadcasting", action="store_true")
    push.add_argument("--until-stdin", action="store_true", help="also stop on a line (or EOF) on stdin")
    pull = command("pull-consume", run_pull_consume)
    pull.add_argument("--count", type=int, required=True)
    pull.add_argument("--deadline", type=float, default=30.0)
    return parser


def main() -> int:
    args = build_parser().parse_args()
    args.run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
