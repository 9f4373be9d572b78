"""The commands of ``sparkmq admin``: mqadmin's names, flags and output shapes (Java 4.9.7 ``SubCommand``s).

Each command is ``async (admin, args, out) -> None`` and writes what mqadmin prints. Option
letters and long names are Java's (``-n/--namesrvAddr``, ``-t/--topic``, ...); ``COMMANDS``
maps a command name to its options and function.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, TextIO

from sparkmq.cli.admin_format import ms_text, printf, topic_config_text, version_desc
from sparkmq.cli.admin_message_commands import (
    consume_message,
    print_msg,
    query_msg_by_id,
    query_msg_by_key,
    query_msg_by_offset,
    query_msg_by_unique_key,
    send_message,
)
from sparkmq.cli.admin_trace_command import query_msg_trace_by_id
from sparkmq.client.admin_ext import AdminExt
from sparkmq.errors import RemoteError, SparkmqError
from sparkmq.message.names import DLQ_GROUP_TOPIC_PREFIX, RETRY_GROUP_TOPIC_PREFIX
from sparkmq.protocol.namesrv_bodies import ClusterInfo, TopicConfig
from sparkmq.protocol.ops_bodies import SubscriptionGroupBody
from sparkmq.tables.attributes import parse_modification

Command = Callable[[AdminExt, argparse.Namespace, TextIO], Awaitable[None]]


@dataclass(frozen=True)
class Opt:
    """One commons-cli option: short letter, long name, takes a value, required."""

    short: str
    long: str
    help: str
    value: bool = True
    required: bool = False


async def _targets(admin: AdminExt, args: argparse.Namespace) -> dict[str, str]:
    """``-b`` (one broker address) or ``-c`` (every master of a cluster): name → address."""
    if getattr(args, "brokerAddr", None):
        return {args.brokerAddr: args.brokerAddr}
    if getattr(args, "clusterName", None):
        return await admin.master_addrs(args.clusterName)
    raise RemoteError("give -b brokerAddr or -c clusterName")


async def update_topic(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    config = TopicConfig(
        args.topic,
        int(args.readQueueNums),
        int(args.writeQueueNums),
        int(args.perm),
        order=str(args.order).lower() == "true",
    )
    modification = parse_modification(args.attributes)  # a malformed one fails here, before any broker
    added = {key[1:]: value for key, value in modification.items() if key.startswith("+")}
    config = dataclasses.replace(config, attributes=tuple(sorted(added.items())))
    for address in (await _targets(admin, args)).values():
        await admin.create_topic(address, config, args.attributes)
        out.write(f"create topic to {address} success.\n")
    out.write(topic_config_text(config) + "\n")


async def delete_topic(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    for address in (await admin.master_addrs(args.clusterName)).values():
        await admin.delete_topic_in_broker(address, args.topic)
    out.write(f"delete topic [{args.topic}] from cluster [{args.clusterName}] success.\n")
    await admin.delete_topic_in_namesrv(args.topic, args.clusterName)
    out.write(f"delete topic [{args.topic}] from NameServer success.\n")


async def topic_list(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    topics = await admin.topic_list()
    if not args.clusterModel:
        out.writelines(topic + "\n" for topic in topics)
        return
    info = await admin.cluster_info()
    cluster_of = {broker: cluster for cluster, names in info.cluster_addr_table.items() for broker in names}
    printf(out, "%-20s  %-48s  %-48s%n", "#Cluster Name", "#Topic", "#Consumer Group")
    for topic in topics:
        if topic.startswith((RETRY_GROUP_TOPIC_PREFIX, DLQ_GROUP_TOPIC_PREFIX)):
            continue
        try:
            route = await admin.topic_route(topic)
            cluster = next((cluster_of.get(b.broker_name, "") for b in route.broker_datas), "")
            groups = await admin.consumed_by(topic) or [""]
        except SparkmqError:  # as mqadmin: a topic whose brokers do not answer is listed without groups
            cluster, groups = "", [""]
        for group in groups:
            printf(out, "%-20s  %-48s  %-48s%n", cluster, topic, group)


async def topic_route(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    route = await admin.topic_route(args.topic)
    out.write(json.dumps(json.loads(route.encode()), indent="\t") + "\n")


async def topic_status(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    stats = await admin.topic_stats(args.topic)
    header = ("#Broker Name", "#QID", "#Min Offset", "#Max Offset", "#Last Updated")
    printf(out, "%-32s  %-4s  %-20s  %-20s    %s%n", *header)
    for mq in sorted(stats.offset_table, key=lambda q: (q.broker_name, q.queue_id)):
        o = stats.offset_table[mq]
        last = ms_text(o.last_update_timestamp) if o.last_update_timestamp else ""
        printf(out, "%-32s  %-4d  %-20d  %-20d    %s%n", mq.broker_name, mq.queue_id, o.min_offset, o.max_offset, last)


async def table_status(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    statuses = await admin.table_statuses(args.topic, getattr(args, "brokerAddr", None))
    for broker, status in sorted(statuses.items()):
        printf(out, "%-32s  table %s  version %d  state %s%n", broker, status.uri, status.table_version, status.state)
        if status.reason:
            printf(out, "%-32s  reason: %s%n", broker, status.reason)
        header = ("#QID", "#Table Offset", "#Min Offset", "#Max Offset", "#Lag Msgs", "#Lag Seconds")
        printf(out, "%-4s  %-14s  %-14s  %-14s  %-10s  %s%n", *header)
        for q in status.queues:
            table_offset = str(q.table_offset) if q.table_offset >= 0 else "-"
            printf(
                out,
                "%-4d  %-14s  %-14d  %-14d  %-10d  %.3f%n",
                q.queue_id,
                table_offset,
                q.min_offset,
                q.max_offset,
                q.lag_messages,
                q.lag_seconds,
            )


async def topic_cluster_list(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    route, info = await admin.topic_route(args.topic), await admin.cluster_info()
    names = {b.broker_name for b in route.broker_datas}
    clusters = sorted(c for c, members in info.cluster_addr_table.items() if names & set(members))
    out.writelines(cluster + "\n" for cluster in clusters)


async def update_sub_group(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    group = SubscriptionGroupBody(
        args.groupName,
        str(args.consumeEnable).lower() == "true",
        int(args.retryQueueNums),
        int(args.retryMaxTimes),
        str(args.consumeBroadcastEnable).lower() == "true",
    )
    for address in (await _targets(admin, args)).values():
        await admin.create_group(address, group)
        out.write(f"create subscription group to {address} success.\n")
    out.write(
        f"SubscriptionGroupConfig [groupName={group.group_name}, "
        f"consumeEnable={str(group.consume_enable).lower()}, "
        f"consumeBroadcastEnable={str(group.consume_broadcast_enable).lower()}, retryQueueNums="
        f"{group.retry_queue_nums}, retryMaxTimes={group.retry_max_times}]\n"
    )


async def delete_sub_group(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    for address in (await _targets(admin, args)).values():
        await admin.delete_group(address, args.groupName, bool(args.removeOffset))
        out.write(
            f"delete subscription group [{args.groupName}] from broker [{address}] in cluster "
            f"[{args.clusterName or ''}] success.\n"
        )


async def consumer_progress(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    if not args.groupName:
        printf(
            out,
            "%-32s  %-6s  %-24s %-5s  %-14s  %-7s  %s%n",
            "#Group",
            "#Count",
            "#Version",
            "#Type",
            "#Model",
            "#TPS",
            "#Diff Total",
        )
        for topic in await admin.topic_list():
            if topic.startswith(RETRY_GROUP_TOPIC_PREFIX):
                group = topic[len(RETRY_GROUP_TOPIC_PREFIX) :]
                stats = await admin.consume_stats(group)
                diff = sum(max(o.broker_offset - o.consumer_offset, 0) for o in stats.offset_table.values())
                try:
                    cc = await admin.consumer_connection(group)
                    count, version = len(cc.connection_set), version_desc(min(c.version for c in cc.connection_set))
                    kind = "PULL" if cc.consume_type.name == "CONSUME_ACTIVELY" else "PUSH"
                    model = cc.message_model.name if kind == "PUSH" else ""
                except RemoteError:
                    count, version, kind, model = 0, "OFFLINE", "", ""
                printf(
                    out,
                    "%-32s  %-6d  %-24s %-5s  %-14s  %-7d  %d%n",
                    group,
                    count,
                    version,
                    kind,
                    model,
                    int(stats.consume_tps),
                    diff,
                )
        return
    stats = await admin.consume_stats(args.groupName)
    owners = await admin.queue_owners(args.groupName)
    printf(
        out,
        "%-32s  %-32s  %-4s  %-20s  %-20s  %-20s %-20s  %s%n",
        "#Topic",
        "#Broker Name",
        "#QID",
        "#Broker Offset",
        "#Consumer Offset",
        "#Client IP",
        "#Diff",
        "#LastTime",
    )
    total = 0
    for mq in sorted(stats.offset_table, key=lambda q: (q.topic, q.broker_name, q.queue_id)):
        o = stats.offset_table[mq]
        diff = o.broker_offset - o.consumer_offset
        total += diff
        last = datetime.fromtimestamp(o.last_timestamp / 1000).strftime("%Y-%m-%d %H:%M:%S") if o.last_timestamp else ""
        printf(
            out,
            "%-32s  %-32s  %-4d  %-20d  %-20d  %-20s %-20d  %s%n",
            mq.topic,
            mq.broker_name,
            mq.queue_id,
            o.broker_offset,
            o.consumer_offset,
            owners.get(mq, "NA"),
            diff,
            last,
        )
    out.write("\n")
    out.write(f"Consume TPS: {stats.consume_tps:.2f}\n")
    out.write(f"Consume Diff Total: {total}\n")


async def consumer_connection(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    cc = await admin.consumer_connection(args.consumerGroup)
    for i, c in enumerate(sorted(cc.connection_set, key=lambda c: c.client_id), 1):
        printf(out, "%03d  %-32s %-22s %-8s %s%n", i, c.client_id, c.client_addr, c.language, version_desc(c.version))
    out.write("\nBelow is subscription:\n")
    for i, (topic, sub) in enumerate(sorted(cc.subscription_table.items()), 1):
        printf(out, "%03d  Topic: %-40s SubExpression: %s%n", i, topic, sub.sub_string)
    out.write(
        f"\nConsumeType: {cc.consume_type.name}\nMessageModel: {cc.message_model.name}\n"
        f"ConsumeFromWhere: {cc.consume_from_where.name}\n"
    )


async def producer_connection(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    pc = await admin.producer_connection(args.producerGroup, args.topic)
    for i, c in enumerate(sorted(pc.connection_set, key=lambda c: c.client_id), 1):
        printf(out, "%04d  %-32s %-22s %-8s %s%n", i, c.client_id, c.client_addr, c.language, version_desc(c.version))


def parse_timestamp(text: str) -> int:
    """resetOffsetByTime's ``-s``: ``now``, epoch milliseconds, or ``yyyy-MM-dd#HH:mm:ss:SSS``."""
    if text == "now":
        return -1
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        return int(datetime.strptime(text, "%Y-%m-%d#%H:%M:%S:%f").timestamp() * 1000)
    except ValueError as exc:
        raise RemoteError(f"timestamp {text!r} is not now, milliseconds or yyyy-MM-dd#HH:mm:ss:SSS") from exc


async def reset_offset_by_time(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    stamp, force = parse_timestamp(args.timestamp), str(args.force).lower() != "false"
    table = await admin.reset_offset_by_time(args.group, args.topic, stamp, force)
    out.write(
        f"rollback consumer offset by specified group[{args.group}], topic[{args.topic}], "
        f"force[{str(force).lower()}], timestamp(string)[{args.timestamp}], timestamp(long)[{stamp}]\n"
    )
    printf(out, "%-40s  %-40s  %-40s%n", "#brokerName", "#queueId", "#offset")
    for mq in sorted(table, key=lambda q: (q.broker_name, q.queue_id)):
        printf(out, "%-40s  %-40d  %-40d%n", mq.broker_name, mq.queue_id, table[mq])


async def cluster_list(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    info = await admin.cluster_info()
    if args.moreStats:
        await _cluster_more_stats(admin, info, out)
        return
    fmt = "%-16s  %-22s  %-4s  %-22s %-16s %19s %19s %10s %5s %6s\n"
    out.write(
        fmt
        % (
            "#Cluster Name",
            "#Broker Name",
            "#BID",
            "#Addr",
            "#Version",
            "#InTPS(LOAD)",
            "#OutTPS(LOAD)",
            "#PCWait(ms)",
            "#Hour",
            "#SPACE",
        )
    )
    for cluster in sorted(info.cluster_addr_table):
        for name in sorted(info.cluster_addr_table[cluster]):
            for bid, address in sorted(info.broker_addr_table[name].broker_addrs.items()):
                kv = await admin.runtime_info(address)
                put, get = float(kv["putTps"].split()[0]), float(kv["getTransferedTps"].split()[0])
                earliest = int(kv.get("earliestMessageTimeStamp") or 0)
                hours = (time.time() * 1000 - earliest) / 3_600_000 if earliest else 0.0
                in_load = f"{put:9.2f}({kv['sendThreadPoolQueueSize']},{kv['sendThreadPoolQueueHeadWaitTimeMills']}ms)"
                out_load = f"{get:9.2f}({kv['pullThreadPoolQueueSize']},{kv['pullThreadPoolQueueHeadWaitTimeMills']}ms)"
                out.write(
                    fmt
                    % (
                        cluster,
                        name,
                        bid,
                        address,
                        kv["brokerVersionDesc"],
                        in_load,
                        out_load,
                        kv["pageCacheLockTimeMills"],
                        f"{hours:2.2f}",
                        f"{float(kv['commitLogDiskRatio']):.4f}",
                    )
                )


async def _cluster_more_stats(admin: AdminExt, info: ClusterInfo, out: TextIO) -> None:
    """``clusterList -m``: messages in/out yesterday and today, from the msgPut/GetTotal* runtime keys."""
    printf(
        out,
        "%-16s  %-32s %14s %14s %14s %14s%n",
        "#Cluster Name",
        "#Broker Name",
        "#InTotalYest",
        "#OutTotalYest",
        "#InTotalToday",
        "#OutTotalToday",
    )
    for cluster in sorted(info.cluster_addr_table):
        for name in sorted(info.cluster_addr_table[cluster]):
            for _bid, address in sorted(info.broker_addr_table[name].broker_addrs.items()):
                kv = {k: int(v) for k, v in (await admin.runtime_info(address)).items() if k.startswith("msg")}
                printf(
                    out,
                    "%-16s  %-32s %14d %14d %14d %14d%n",
                    cluster,
                    name,
                    kv["msgPutTotalTodayMorning"] - kv["msgPutTotalYesterdayMorning"],
                    kv["msgGetTotalTodayMorning"] - kv["msgGetTotalYesterdayMorning"],
                    kv["msgPutTotalTodayNow"] - kv["msgPutTotalTodayMorning"],
                    kv["msgGetTotalTodayNow"] - kv["msgGetTotalTodayMorning"],
                )


async def broker_status(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    for address in (await _targets(admin, args)).values():
        for key, value in sorted((await admin.runtime_info(address)).items()):
            printf(out, "%-32s: %s%n", key, value)


async def get_broker_config(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    for address in (await _targets(admin, args)).values():
        out.write(f"============{address}============\n")
        for key, value in sorted((await admin.broker_config(address)).items()):
            printf(out, "%-50s=  %s%n", key, value)


async def update_broker_config(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    for address in (await _targets(admin, args)).values():
        await admin.update_broker_config(address, {args.key: args.value})
        out.write(f"update broker config success, {address}\n")


async def wipe_write_perm(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    counts = await admin.write_perm(args.brokerName, add=False)
    for address, count in counts.items():
        printf(out, "wipe write perm of broker[%s] in name server[%s] OK, %d%n", args.brokerName, address, count)


async def add_write_perm(admin: AdminExt, args: argparse.Namespace, out: TextIO) -> None:
    counts = await admin.write_perm(args.brokerName, add=True)
    for address, count in counts.items():
        printf(out, "add write perm of broker[%s] in name server[%s] OK, %d%n", args.brokerName, address, count)


N = Opt("n", "namesrvAddr", "NameServer addresses, host:port[;host:port] (default: $NAMESRV_ADDR)")
TOPIC = Opt("t", "topic", "topic name", required=True)
BROKER = Opt("b", "brokerAddr", "broker address host:port")
CLUSTER = Opt("c", "clusterName", "cluster name")
COMMANDS: dict[str, tuple[str, tuple[Opt, ...], Command, dict[str, Any]]] = {
    "updateTopic": (
        "Update or create topic",
        (
            N,
            BROKER,
            CLUSTER,
            TOPIC,
            Opt("r", "readQueueNums", "read queues"),
            Opt("w", "writeQueueNums", "write queues"),
            Opt("p", "perm", "permission 2|4|6"),
            Opt("o", "order", "ordered topic true|false"),
            Opt("a", "attributes", "attributes, +key=value to set, -key to remove, e.g. +table.enable=true"),
        ),
        update_topic,
        {"readQueueNums": "8", "writeQueueNums": "8", "perm": "6", "order": "false"},
    ),
    "deleteTopic": (
        "Delete topic from broker and NameServer",
        (N, Opt("c", "clusterName", "cluster name", required=True), TOPIC),
        delete_topic,
        {},
    ),
    "topicList": (
        "Fetch all topic list from name server",
        (N, Opt("c", "clusterModel", "with each topic's cluster and consumer groups", value=False)),
        topic_list,
        {},
    ),
    "topicRoute": ("Examine topic route info", (N, TOPIC), topic_route, {}),
    "topicStatus": ("Examine topic Status info", (N, TOPIC), topic_status, {}),
    "tableStatus": (
        "sparkmq: a table-enabled topic's Delta table against its queues (docs/tables.md)",
        (N, BROKER, TOPIC),
        table_status,
        {},
    ),
    "topicClusterList": ("Get cluster info for topic", (N, TOPIC), topic_cluster_list, {}),
    "updateSubGroup": (
        "Update or create subscription group",
        (
            N,
            BROKER,
            CLUSTER,
            Opt("g", "groupName", "consumer group name", required=True),
            Opt("s", "consumeEnable", "consume enable"),
            Opt("d", "consumeBroadcastEnable", "broadcast"),
            Opt("q", "retryQueueNums", "retry queues"),
            Opt("r", "retryMaxTimes", "retry max times"),
        ),
        update_sub_group,
        {"consumeEnable": "true", "consumeBroadcastEnable": "true", "retryQueueNums": "1", "retryMaxTimes": "16"},
    ),
    "deleteSubGroup": (
        "Delete subscription group from broker",
        (
            N,
            BROKER,
            CLUSTER,
            Opt("g", "groupName", "subscription group name", required=True),
            Opt("r", "removeOffset", "remove the group's offsets too", value=False),
        ),
        delete_sub_group,
        {},
    ),
    "consumerProgress": (
        "Query consumers's progress, speed",
        (N, Opt("g", "groupName", "consumer group name")),
        consumer_progress,
        {},
    ),
    "consumerConnection": (
        "Query consumer's socket connection, client version and subscription",
        (N, Opt("g", "consumerGroup", "consumer group name", required=True)),
        consumer_connection,
        {},
    ),
    "producerConnection": (
        "Query producer's socket connection and client version",
        (N, Opt("g", "producerGroup", "producer group name", required=True), TOPIC),
        producer_connection,
        {},
    ),
    "queryMsgById": (
        "Query Message by Id",
        (N, Opt("i", "msgId", "offset message id(s), comma separated", required=True)),
        query_msg_by_id,
        {},
    ),
    "queryMsgByKey": (
        "Query Message by Key",
        (N, TOPIC, Opt("k", "msgKey", "message key", required=True)),
        query_msg_by_key,
        {},
    ),
    "queryMsgByUniqueKey": (
        "Query Message by Unique key",
        (N, TOPIC, Opt("i", "msgId", "unique key", required=True)),
        query_msg_by_unique_key,
        {},
    ),
    "queryMsgTraceById": (
        "query a message trace",
        (
            N,
            Opt("i", "msgId", "Message Id", required=True),
            Opt("t", "traceTopic", "The name value of message trace topic"),
        ),
        query_msg_trace_by_id,
        {},
    ),
    "queryMsgByOffset": (
        "Query Message by offset",
        (
            N,
            TOPIC,
            Opt("b", "brokerName", "broker name", required=True),
            Opt("i", "queueId", "queue id", required=True),
            Opt("o", "offset", "queue offset", required=True),
        ),
        query_msg_by_offset,
        {},
    ),
    "resetOffsetByTime": (
        "Reset consumer offset by timestamp(without client restart)",
        (
            N,
            Opt("g", "group", "consumer group", required=True),
            TOPIC,
            Opt("s", "timestamp", "now | ms | yyyy-MM-dd#HH:mm:ss:SSS", required=True),
            Opt("f", "force", "rewind even past the committed offset"),
        ),
        reset_offset_by_time,
        {"force": "true"},
    ),
    "clusterList": (
        "List all of clusters",
        (N, Opt("m", "moreStats", "Print more stats", value=False)),
        cluster_list,
        {},
    ),
    "brokerStatus": ("Fetch broker runtime status data", (N, BROKER, CLUSTER), broker_status, {}),
    "getBrokerConfig": ("Get broker config by cluster or special broker", (N, BROKER, CLUSTER), get_broker_config, {}),
    "updateBrokerConfig": (
        "Update broker's config",
        (
            N,
            BROKER,
            CLUSTER,
            Opt("k", "key", "config key", required=True),
            Opt("v", "value", "config value", required=True),
        ),
        update_broker_config,
        {},
    ),
    "wipeWritePerm": (
        "Wipe write perm of broker in all name server",
        (N, Opt("b", "brokerName", "broker name", required=True)),
        wipe_write_perm,
        {},
    ),
    "addWritePerm": (
        "Add write perm of broker in all name server",
        (N, Opt("b", "brokerName", "broker name", required=True)),
        add_write_perm,
        {},
    ),
    "sendMessage": (
        "Send a message",
        (
            N,
            TOPIC,
            Opt("p", "body", "UTF-8 string format of the message body", required=True),
            Opt("k", "key", "message keys"),
            Opt("c", "tags", "message tags"),
            Opt("b", "broker", "send to this broker name"),
            Opt("i", "qid", "send to this queue id"),
        ),
        send_message,
        {},
    ),
    "consumeMessage": (
        "Consume message",
        (
            N,
            TOPIC,
            Opt("b", "brokerName", "broker name"),
            Opt("i", "queueId", "queue id"),
            Opt("o", "offset", "queue offset"),
            Opt("g", "consumerGroup", "consumer group name"),
            Opt("c", "count", "messages to consume"),
        ),
        consume_message,
        {"count": "128", "consumerGroup": "TOOLS_CONSUMER"},
    ),
    "printMsg": (
        "Print Message Detail",
        (N, TOPIC, Opt("c", "charsetName", "body charset"), Opt("d", "printBody", "print the body")),
        print_msg,
        {"charsetName": "UTF-8", "printBody": "true"},
    ),
}

__all__ = ["COMMANDS", "Opt", "parse_timestamp"]
