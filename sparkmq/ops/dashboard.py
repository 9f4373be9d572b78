"""The web dashboard: what operators use rocketmq-dashboard for, as server-rendered pages (starlette).

Pages: ``/`` cluster and brokers; ``/topics`` and ``/topics/{topic}`` (per-queue min/max offsets,
last update, put TPS, a table-enabled topic's table lag); ``/groups`` and ``/groups/{group}`` (lag
per queue and a lag-over-time chart drawn as inline SVG from samples taken every
``sample_interval_s``); ``/messages`` (query by key, unique key or offset message id, body preview;
one message's trace records, ``traceTopic`` naming another trace topic); ``/send`` (a test message).
Read-only unless ACL credentials are given (every request is then signed with them, and the broker's ACL decides) or
``allow_writes=True``; a read-only dashboard refuses ``POST /send`` with 403.

>>> # app = create_app(DashboardConfig("127.0.0.1:9876"))   # serve with uvicorn
"""

from __future__ import annotations

import asyncio
import contextlib
import html
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import parse_qs

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from sparkmq.client.admin_ext import AdminExt
from sparkmq.client.message import Message, ReceivedMessage
from sparkmq.client.producer import AsyncProducer
from sparkmq.errors import SparkmqError
from sparkmq.message.names import RETRY_GROUP_TOPIC_PREFIX, is_retry_topic, is_system_topic
from sparkmq.ops import credentials
from sparkmq.ops.lag_history import LagHistory
from sparkmq.ops.pages import layout, table
from sparkmq.ops.svg_chart import line_chart
from sparkmq.ops.trace_section import trace_section
from sparkmq.protocol.bodies import MessageQueue

logger = logging.getLogger(__name__)
PREVIEW_BYTES = 512
TEST_PRODUCER_GROUP = "DASHBOARD_TEST_PRODUCER"


@dataclass(frozen=True)
class DashboardConfig:
    """What the dashboard talks to and may do."""

    namesrv_addr: str
    allow_writes: bool = False
    sample_interval_s: float = 5.0
    access_key: str | None = None  # ACL credentials: requests are signed with them, and writes are allowed
    secret_key: str | None = None

    @property
    def writable(self) -> bool:
        return self.allow_writes or bool(self.access_key and self.secret_key)


async def table_section(admin: AdminExt, topic: str, addrs: dict[str, str]) -> str:
    """The topic's Delta table against its queues on each broker that writes one (docs/tables.md); "" if none."""
    rows: list[list[object]] = []
    notes = []
    for name, addr in sorted(addrs.items()):
        if not addr:
            continue
        try:
            status = (await admin.table_statuses(topic, addr))[addr]
        except SparkmqError:  # no table for this topic there, or a broker writing no tables
            continue
        state = status.state + (f": {status.reason}" if status.reason else "")
        notes.append(
            f"<p>Table on {html.escape(name)}: {html.escape(status.uri)}, "
            f"<span class='table-state'>{html.escape(state)}</span></p>"
        )
        for q in status.queues:
            offset = q.table_offset if q.table_offset >= 0 else "–"
            rows.append([name, q.queue_id, offset, q.max_offset, q.lag_messages, f"{q.lag_seconds:.1f}"])
    if not notes:
        return ""
    headers = ["Broker", "Queue", "Table offset", "Max offset", "Lag (messages)", "Lag (seconds)"]
    return "<h2>Table</h2>" + "".join(notes) + table(headers, rows, "table-lag")


BROKER_GROUPS = frozenset({"CID_RMQ_SYS_TRANS", "TOOLS_CONSUMER", "FILTERSRV_CONSUMER", "SELF_TEST_C_GROUP"})


def retry_groups(topics: list[str]) -> set[str]:
    """The consumer groups that have a retry topic among ``topics``."""
    return {topic[len(RETRY_GROUP_TOPIC_PREFIX) :] for topic in topics if is_retry_topic(topic)}


async def known_groups(admin: AdminExt, history: LagHistory) -> set[str]:
    """Groups with a retry topic, the masters' subscription groups (POP groups have no retry topic until a
    redelivery) but the brokers' own, and every group viewed so far."""
    held = {group for group in await admin.group_names() if group not in BROKER_GROUPS}
    return retry_groups(await admin.topic_list()) | held | set(history.groups)


def is_user_topic(topic: str, brokers: set[str]) -> bool:
    return not is_system_topic(topic) and topic not in brokers


def create_app(config: DashboardConfig) -> Starlette:
    """The ASGI app; its lifespan opens the admin client and runs the lag sampler."""
    history = LagHistory()
    config_writable = config.writable
    client_options = credentials.client_options(config.access_key, config.secret_key)  # ConfigError before serving
    seen_offsets: dict[MessageQueue, tuple[float, int]] = {}  # per-queue TPS = max-offset growth between views

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        admin = AdminExt(config.namesrv_addr, **client_options)
        app.state.admin = admin
        sampler = asyncio.get_running_loop().create_task(_sample_forever(admin, history, config.sample_interval_s))
        try:
            yield
        finally:
            sampler.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sampler
            await admin.close()

    async def cluster(request: Request) -> Response:
        admin: AdminExt = request.app.state.admin
        info = await admin.cluster_info()
        rows = []
        for name in sorted(info.cluster_addr_table):
            for broker in sorted(info.cluster_addr_table[name]):
                for bid, addr in sorted(info.broker_addr_table[broker].broker_addrs.items()):
                    kv = await admin.runtime_info(addr)
                    link = f'<a href="/brokers/{html.escape(addr)}">{html.escape(addr)}</a>'
                    rows.append(
                        [
                            html.escape(name),
                            html.escape(broker),
                            bid,
                            link,
                            html.escape(kv.get("brokerVersionDesc", "")),
                            kv["putTps"].split()[0],
                            kv["getTransferedTps"].split()[0],
                            kv.get("msgPutTotalTodayNow", ""),
                            kv.get("msgGetTotalTodayNow", ""),
                            kv.get("runtime", ""),
                        ]
                    )
        body = table(
            ["Cluster", "Broker", "BID", "Address", "Version", "In TPS", "Out TPS", "Put today", "Got today", "Uptime"],
            rows,
            "brokers",
            raw=True,
        )
        return layout("Cluster", f"<p>NameServer {html.escape(config.namesrv_addr)}</p>" + body, config.writable)

    async def broker_detail(request: Request) -> Response:
        admin: AdminExt = request.app.state.admin
        addr = request.path_params["addr"]
        status = sorted((await admin.runtime_info(addr)).items())
        config = sorted((await admin.broker_config(addr)).items())
        body = (
            "<h2>Runtime status</h2>"
            + table(["Key", "Value"], status, "status")
            + "<h2>Configuration</h2>"
            + table(["Key", "Value"], config, "config")
        )
        return layout(f"Broker {addr}", body, config_writable)

    async def topics(request: Request) -> Response:
        admin: AdminExt = request.app.state.admin
        brokers = set((await admin.cluster_info()).broker_addr_table)
        names = [t for t in await admin.topic_list() if is_user_topic(t, brokers)]
        rows = [[f'<a href="/topics/{html.escape(t)}">{html.escape(t)}</a>'] for t in names]
        return layout("Topics", table(["Topic"], rows, "topics", raw=True), config.writable)

    async def topic_detail(request: Request) -> Response:
        admin: AdminExt = request.app.state.admin
        topic = request.path_params["topic"]
        stats = await admin.topic_stats(topic)
        route = await admin.topic_route(topic)
        addrs = {b.broker_name: b.broker_addrs.get(0, "") for b in route.broker_datas}
        tps = {
            name: (await admin.view_stats(addr, "TOPIC_PUT_NUMS", topic)).stats_minute.tps
            for name, addr in addrs.items()
            if addr
        }
        now, rows = time.time(), []
        for mq, o in sorted(stats.offset_table.items(), key=lambda kv: (kv[0].broker_name, kv[0].queue_id)):
            before = seen_offsets.get(mq)
            seen_offsets[mq] = (now, o.max_offset)
            rate = f"{(o.max_offset - before[1]) / (now - before[0]):.2f}" if before and now > before[0] else "–"
            rows.append([mq.broker_name, mq.queue_id, o.min_offset, o.max_offset, rate, _when(o.last_update_timestamp)])
        summary = "".join(
            f"<p>Put TPS (last minute) on {html.escape(b)}: <span class='tps'>{v:.2f}</span></p>"
            for b, v in tps.items()
        )
        body = summary + table(
            ["Broker", "Queue", "Min offset", "Max offset", "TPS since last view", "Last updated"], rows, "queues"
        )
        return layout(f"Topic {topic}", body + await table_section(admin, topic, addrs), config.writable)

    async def groups(request: Request) -> Response:
        admin: AdminExt = request.app.state.admin
        names = sorted(await known_groups(admin, history))
        rows = []
        for group in names:
            stats = await admin.consume_stats(group)
            lag = sum(max(o.broker_offset - o.consumer_offset, 0) for o in stats.offset_table.values())
            rows.append(
                [
                    f'<a href="/groups/{html.escape(group)}">{html.escape(group)}</a>',
                    f"{stats.consume_tps:.2f}",
                    str(lag),
                ]
            )
        return layout(
            "Consumer groups", table(["Group", "Consume TPS", "Lag"], rows, "groups", raw=True), config.writable
        )

    async def group_detail(request: Request) -> Response:
        admin: AdminExt = request.app.state.admin
        group = request.path_params["group"]
        stats = await admin.consume_stats(group)
        if group not in history.groups:
            await _sample_group(admin, history, group)
        queues = sorted(stats.offset_table.items(), key=lambda kv: (kv[0].topic, kv[0].queue_id))
        lags = [max(o.broker_offset - o.consumer_offset, 0) for _mq, o in queues]
        rows = [
            [mq.topic, mq.broker_name, mq.queue_id, o.broker_offset, o.consumer_offset, lag]
            for (mq, o), lag in zip(queues, lags, strict=True)
        ]
        total = sum(lags)
        try:
            members = await admin.consumer_connection(group)
            online = table(
                ["Client id", "Address", "Language", "Version"],
                [[c.client_id, c.client_addr, c.language, c.version] for c in members.connection_set],
                "clients",
            )
        except SparkmqError as exc:
            online = f"<p id='clients'>{html.escape(exc.remark)}</p>"
        body = (
            f"<p>Consume TPS {stats.consume_tps:.2f}, total lag <span id='total-lag'>{total}</span></p>"
            + line_chart(history.points(group), title=f"lag of {group}")
            + table(["Topic", "Broker", "Queue", "Broker offset", "Consumer offset", "Lag"], rows, "lag")
            + "<h2>Online consumers</h2>"
            + online
        )
        return layout(f"Group {group}", body, config.writable)

    async def lag_json(request: Request) -> Response:
        return JSONResponse({"samples": history.points(request.path_params["group"])})

    async def messages(request: Request) -> Response:
        admin: AdminExt = request.app.state.admin
        q = request.query_params
        topic, key, msg_id = q.get("topic", ""), q.get("key", ""), q.get("msgId", "")
        form = (
            f"<form method='get' action='/messages'><label>Topic <input name='topic' value='{html.escape(topic)}'>"
            f"</label> <label>Key <input name='key' value='{html.escape(key)}'></label> <label>Message id "
            f"<input name='msgId' value='{html.escape(msg_id)}'></label> <button type='submit'>Search</button></form>"
        )
        found: list[ReceivedMessage] = []
        if key and topic:
            found = await admin.query_by_key(topic, key)
        elif msg_id and topic:
            found = await admin.query_by_key(topic, msg_id, unique=True) or [await admin.message_by_offset_id(msg_id)]
        elif msg_id:
            found = [await admin.message_by_offset_id(msg_id)]
        rows = [
            [
                m.msg_id,
                m.topic,
                m.queue.queue_id,
                m.queue_offset,
                m.tags or "",
                " ".join(m.keys),
                _when(m.store_timestamp),
                _preview(m.body),
            ]
            for m in found
        ]
        result = table(["Message id", "Topic", "Queue", "Offset", "Tags", "Keys", "Stored", "Body"], rows, "messages")
        if msg_id and len(found) == 1:  # one message: its traces (by its unique key, as written by the clients)
            result += await trace_section(admin, found[0].msg_id, q.get("traceTopic") or None)
        return layout("Messages", form + (result if (key or msg_id) else ""), config.writable)

    async def send_form(request: Request) -> Response:
        if not config.writable:
            body = (
                "<p class='readonly'>Read-only: start the dashboard with --access-key/--secret-key (ACL) or "
                "--allow-writes to send test messages.</p>"
            )
            return layout("Send a test message", body, config.writable)
        form = (
            "<form method='post' action='/send'><label>Topic <input name='topic'></label> <label>Tags <input "
            "name='tags'></label> <label>Keys <input name='keys'></label><br><label>Body<br><textarea name='body' "
            "rows='4' cols='60'></textarea></label><br><button type='submit'>Send</button></form>"
        )
        return layout("Send a test message", form, config.writable)

    async def send(request: Request) -> Response:
        if not config.writable:
            return PlainTextResponse(
                "read-only dashboard: start it with ACL credentials or --allow-writes to send", status_code=403
            )
        # The form is application/x-www-form-urlencoded; parsed here rather than pulling in python-multipart.
        form = {k: v[0] for k, v in parse_qs((await request.body()).decode("utf-8")).items()}
        topic, body = form.get("topic", ""), form.get("body", "")
        message = Message(topic, body.encode(), tags=form.get("tags") or None, keys=form.get("keys", ""))
        async with AsyncProducer(TEST_PRODUCER_GROUP, config.namesrv_addr, **client_options) as producer:
            result = await producer.send(message)
        text = (
            f"<p id='sent'>Sent: {html.escape(result.status.name)} msgId <code>{html.escape(result.msg_id)}</code> "
            f"to {html.escape(result.queue.broker_name)} queue {result.queue.queue_id} offset {result.queue_offset}"
            "</p><p><a "
            f"href='/messages?topic={html.escape(topic)}&amp;msgId={html.escape(result.msg_id)}'>view it</a></p>"
        )
        return layout("Send a test message", text, config.writable)

    async def failed(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, SparkmqError)
        return layout("Error", f"<p class='error'>{html.escape(exc.remark)}</p>", config.writable, status=502)

    routes = [
        Route("/", cluster),
        Route("/brokers/{addr}", broker_detail),
        Route("/topics", topics),
        Route("/topics/{topic}", topic_detail),
        Route("/groups", groups),
        Route("/groups/{group}", group_detail),
        Route("/api/lag/{group}", lag_json),
        Route("/messages", messages),
        Route("/send", send_form, methods=["GET"]),
        Route("/send", send, methods=["POST"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers={SparkmqError: failed})


async def _sample_group(admin: AdminExt, history: LagHistory, group: str) -> None:
    stats = await admin.consume_stats(group)
    per_queue: dict[MessageQueue, int] = {
        mq: max(o.broker_offset - o.consumer_offset, 0) for mq, o in stats.offset_table.items()
    }
    history.record(group, time.time(), sum(per_queue.values()), per_queue)


async def _sample_forever(admin: AdminExt, history: LagHistory, interval_s: float) -> None:
    """Every ``interval_s``: the lag of every group with a retry topic and every group viewed so far."""
    while True:
        try:
            for group in sorted(await known_groups(admin, history)):
                await _sample_group(admin, history, group)
        except SparkmqError as exc:
            logger.warning("lag sampling failed: %s", exc.remark)
        await asyncio.sleep(interval_s)


def _when(ms: int) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(ms / 1000)) if ms else ""


def _preview(body: bytes) -> str:
    text = body[:PREVIEW_BYTES].decode("utf-8", errors="replace")
    return text + ("…" if len(body) > PREVIEW_BYTES else "")
