"""Drive the real C++ RocketMQ client's TransactionMQProducer (PyPI ``rocketmq-client-python`` 0.5.0rc2).

Runs under ``.venv-rocketmq-tx/bin/python`` (``make venv`` creates it): 0.4.4's C API has no
transaction producer, the 0.5.0rc2 wheel bundles a librocketmq that has one. Prints one JSON
line per event on stdout, the harness (``support/rocketmq_cpp.py``) parses them.

    transact   send COUNT messages with send_message_in_transaction; the local transaction of
               message i answers DECIDE[i % len(DECIDE)] (commit / rollback / unknown); a
               check-back answers --check for those that said unknown, the decision for the
               others. After the sends it waits until --wait-checks checks arrived (or a line
               on stdin, or the deadline), then shuts down.

Example::

    .venv-rocketmq-tx/bin/python tests/interop/cpp_tx_client.py transact --namesrv 127.0.0.1:9876 \\
        --topic T --group PID_T --count 3 --decide commit,rollback,unknown --check commit --wait-checks 1
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from typing import Any

from rocketmq.client import Message, TransactionMQProducer, TransactionStatus

STATES = {
    "commit": TransactionStatus.COMMIT,
    "rollback": TransactionStatus.ROLLBACK,
    "unknown": TransactionStatus.UNKNOWN,
}
_emit_lock = threading.Lock()


def emit(record: dict[str, Any]) -> None:
    with _emit_lock:
        sys.stdout.write(json.dumps(record, sort_keys=True) + "\n")
        sys.stdout.flush()


def text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def run_transact(args: argparse.Namespace) -> None:
    decisions = args.decide.split(",")
    checks: list[str] = []
    enough = threading.Event()

    def on_check(message: Any) -> TransactionStatus:
        body, seq = text(message.body), text(message.get_property("seq")) or "0"
        decided = decisions[int(seq) % len(decisions)]
        answer = args.check if decided == "unknown" else decided  # as an application's local state would say
        emit(
            {
                "event": "checked",
                "body": body,
                "topic": text(message.topic),
                "queue_id": int(message.queue_id),
                "seq": seq,
                "answer": answer,
            }
        )
        checks.append(body or "")
        if args.wait_checks and len(checks) >= args.wait_checks:
            enough.set()
        return STATES[answer]

    producer = TransactionMQProducer(args.group, on_check)
    producer.set_namesrv_addr(args.namesrv)
    producer.start()
    emit({"event": "started"})
    try:
        for index in range(args.count):
            decision = decisions[index % len(decisions)]
            message = Message(args.topic)
            message.set_tags("TagTx")
            message.set_keys(f"tx-{index}")
            message.set_property("seq", str(index))
            message.set_body(f"{args.prefix}-{index}-{decision}")

            def local(msg: Any, user_args: Any, decision: str = decision) -> TransactionStatus:
                emit({"event": "local", "body": text(msg.body), "decision": decision})
                return STATES[decision]

            result = producer.send_message_in_transaction(message, local)
            emit(
                {
                    "event": "sent",
                    "index": index,
                    "decision": decision,
                    "status": int(result.status),
                    "msg_id": result.msg_id,
                    "offset": int(result.offset),
                }
            )
        if args.wait_checks:
            threading.Thread(target=lambda: (sys.stdin.readline(), enough.set()), daemon=True).start()
            enough.wait(args.deadline)
        time.sleep(args.linger)
    finally:
        emit({"event": "shutdown"})  # the library may abort inside shutdown(): see CppClientRun.aborted_in_shutdown
        producer.shutdown()
    emit({"event": "done", "checks": len(checks)})


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    sub = commands.add_parser("transact")
    sub.add_argument("--namesrv", required=True)
    sub.add_argument("--topic", required=True)
    sub.add_argument("--group", required=True)
    sub.add_argument("--count", type=int, required=True)
    sub.add_argument("--decide", default="commit", help="comma-separated commit/rollback/unknown, cycled")
    sub.add_argument(
        "--check",
        default="commit",
        choices=sorted(STATES),
        help="the check-back answer for messages whose local transaction said unknown",
    )
    sub.add_argument("--wait-checks", type=int, default=0, help="wait for this many check-backs before shutdown")
    sub.add_argument("--deadline", type=float, default=60.0)
    sub.add_argument("--linger", type=float, default=0.0)
    sub.add_argument("--prefix", default="tx")
    sub.set_defaults(run=run_transact)
    return parser


def main() -> int:
    args = build_parser().parse_args()
    args.run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
