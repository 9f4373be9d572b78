"""``sparkmq admin``'s message commands: query by id/key/unique key/offset, send, consume, print.

Output shapes are mqadmin's (``QueryMsgByIdSubCommand``, ``QueryMsgByKeySubCommand``,
``SendMessageCommand``, ``ConsumeMessageCommand``, ``PrintMessageSubCommand``); the detail block
shows a body preview where Java writes the body to a file.
"""

from __future__ import annotations

import argparse
import json
from typing import TextIO

from sparkmq.cli.admin_format import ms_text, printf
from sparkmq.client.admin_ext import AdminExt
from sparkmq.client.message import Message, ReceivedMessage
from sparkmq.client.producer import AsyncProducer
from sparkmq.errors import RemoteError
from sparkmq.protocol.bodies import MessageQueue


def message_detail(m: ReceivedMessage) -> str:
    """``QueryMsgByIdSubCommand.printMsg``'s block, with a body preview instead of a body file."""
    rows = [
        ("OffsetID:", m.offset_msg_id),
        ("Topic:", m.topic),
        ("Tags:", f"[{m.tags or ''}]"),
        ("Keys:", f"[{' '.join(m.keys)}]"),
        ("Queue ID:", m.queue.queue_id),
        ("Queue Offset:", m.queue_offset),
        ("CommitLog Offset:", m.commit_log_offset),
        ("Reconsume Times:", m.reconsume_times),
        ("Born Timestamp:", ms_text(m.born_timestamp)),
        ("Store Timestamp:", ms_text(m.store_timestamp)),
        ("Born Host:", m.born_host),
        ("Store Host:", m.store_host),
        ("System Flag:", m.sys_flag),
        ("Properties:", json.dumps(m.properties, sort_keys=True)),
        ("Message ID:", m.msg_id),
        ("Message Body:", body_preview(m.body)),
    ]
    return "".join(f"{k:<20} {v}\n" for k, v in rows)


def body_preview(body: bytes, limit: int = 1024) -> str:
    text = body[:limit].decode("utf-8", errors="replace")
    return text + ("..." if len(body) > limit else "")


async def query_msg_by_id(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    for msg_id in args.msgId.split(","):
        out.write(message_detail(await admin.message_by_offset_id(msg_id.strip())))


async def query_msg_by_key(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    printf(out, "%-50s %4s %40s%n", "#Message ID", "#QID", "#Offset")
    for m in await admin.query_by_key(args.topic, args.msgKey):
        printf(out, "%-50s %4d %40d%n", m.msg_id, m.queue.queue_id, m.queue_offset)


async def query_msg_by_unique_key(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    found = await admin.query_by_key(args.topic, args.msgId, unique=True)
    if not found:
        raise RemoteError(f"no message with unique key {args.msgId} in topic {args.topic}")
    out.write(message_detail(found[0]))


async def query_msg_by_offset(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    queue = MessageQueue(args.topic, args.brokerName, int(args.queueId))
    messages, _next, _max = await admin.pull(queue, int(args.offset), 1)
    if not messages:
        raise RemoteError(
            f"no message at offset {args.offset} of {queue.topic} {queue.broker_name} queue {queue.queue_id}"
        )
    out.write(message_detail(messages[0]))


async def send_message(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    message = Message(args.topic, args.body.encode("utf-8"), tags=args.tags, keys=args.key)
    queue = MessageQueue(args.topic, args.broker, int(args.qid)) if args.broker and args.qid is not None else None
    async with AsyncProducer(
        "TOOLS_PRODUCER", ";".join(admin.instance.namesrv_addresses), **admin.client_options
    ) as producer:
        result = await producer.send(message, queue=queue)
    fmt = "%-32s  %-4s  %-20s    %s\n"
    out.write(fmt % ("#Broker Name", "#QID", "#Send Result", "#MsgId"))
    out.write(fmt % (result.queue.broker_name, result.queue.queue_id, result.status.name, result.msg_id))


def _print_messages(messages: list[ReceivedMessage], charset: str, print_body: bool, out: TextIO) -> None:
    for m in messages:
        body = m.body.decode(charset, errors="replace") if print_body else ""
        out.write(f"MSGID: {m.msg_id} {message_summary(m)} BODY: {body}\n")


def message_summary(m: ReceivedMessage) -> str:
    """A one-line ``MessageExt.toString`` stand-in."""
    return (
        f"MessageExt [brokerName={m.queue.broker_name}, queueId={m.queue.queue_id}, queueOffset={m.queue_offset}, "
        f"storeTimestamp={m.store_timestamp}, msgId={m.msg_id}, topic={m.topic}, tags={m.tags}, keys={m.keys}]"
    )


async def _queues(admin: AdminExt, topic: str, broker: str | None, qid: str | None) -> list[MessageQueue]:
    route = await admin.topic_route(topic)
    queues = [MessageQueue(topic, q.broker_name, i) for q in route.queue_datas for i in range(q.read_queue_nums)]
    return [q for q in queues if (not broker or q.broker_name == broker) and (qid is None or q.queue_id == int(qid))]


async def consume_message(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    remaining = int(args.count)
    for queue in await _queues(admin, args.topic, args.brokerName, args.queueId):
        offset = int(args.offset) if args.offset is not None else 0
        while remaining > 0:
            messages, offset, max_offset = await admin.pull(queue, offset, min(remaining, 32), args.consumerGroup)
            _print_messages(messages[:remaining], "utf-8", True, out)
            remaining -= len(messages)
            if not messages or offset >= max_offset:
                break
    out.write("Consume ok\n")


async def print_msg(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    for queue in await _queues(admin, args.topic, None, None):
        stats = (await admin.topic_stats(args.topic)).offset_table.get(queue)
        low, high = (stats.min_offset, stats.max_offset) if stats else (0, 0)
        out.write(
            f"minOffset={low}, maxOffset={high}, MessageQueue [topic={queue.topic}, "
            f"brokerName={queue.broker_name}, queueId={queue.queue_id}]\n"
        )
        offset = low
        while offset < high:
            messages, offset, _max = await admin.pull(queue, offset, 32)
            _print_messages(messages, args.charsetName, str(args.printBody).lower() != "false", out)
            if not messages:
                break
