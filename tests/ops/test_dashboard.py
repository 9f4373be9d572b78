"""The dashboard in a real headless Chromium (Debian's /usr/bin/chromium, driven by Playwright),
against real NameServer, broker and ``sparkmq dashboard`` processes. Every page visited is
screenshotted into the test's tmp dir and checked for not being blank."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, sync_playwright

from sparkmq.client import ConsumeResult, loop_thread
from sparkmq.client.admin_ext import AdminExt
from sparkmq.client.message import Message, ReceivedMessage
from sparkmq.errors import TopicNotExistError
from sparkmq.protocol import RequestCode, ResponseCode
from sparkmq.protocol.namesrv_bodies import TopicConfig
from sparkmq.protocol.pop_headers import PopMessageRequestHeader
from sparkmq.remoting import RemotingClient
from support.client_harness import Clients
from support.png_check import ink_fraction
from support.processes import BrokerProcess, NamesrvProcess, ServiceProcess, wait_until

pytestmark = pytest.mark.timeout(180)
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@dataclass
class Site:
    namesrv: NamesrvProcess
    broker: BrokerProcess
    writable: str  # base URLs of the two dashboards
    read_only: str


def _dashboard(namesrv: str, *extra: str) -> ServiceProcess:
    return ServiceProcess.launch(
        ["dashboard", "--namesrv", namesrv, "--port", "0", "--lag-sample-interval", "0.3", *extra],
        "dashboard listening on",
    )


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Site]:
    with (
        NamesrvProcess.start() as ns,
        BrokerProcess.start(
            tmp_path_factory.mktemp("dash-store"),
            ns.address,
            "--set",
            f"tableTopicRoot={tmp_path_factory.mktemp('dash-tables')}",
            "--set",
            "tableTopicCommitIntervalMs=100",
            "--set",
            "traceTopicEnable=true",
        ) as broker,
        _dashboard(ns.address, "--allow-writes") as writable,
        _dashboard(ns.address) as read_only,
    ):
        yield Site(ns, broker, writable.ready_line.rsplit(" ", 1)[-1], read_only.ready_line.rsplit(" ", 1)[-1])


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1200, "height": 800})
    try:
        yield context.new_page()
    finally:
        context.close()


def shot(page: Page, tmp_path: Path, name: str) -> Path:
    """Save a full-page screenshot and check it has content (text, tables, chart: not one colour)."""
    path = tmp_path / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    assert ink_fraction(path.read_bytes()) > 0.01, f"{path} looks blank"
    return path


def _topic(site: Site, queues: int = 2, attributes: str | None = None) -> str:
    """A fresh routed topic. Sync Playwright keeps an asyncio loop current on this thread, so the
    admin calls run on the client's own loop thread rather than under asyncio.run."""
    name = f"T_{uuid.uuid4().hex[:8]}"

    async def create() -> None:
        async with AdminExt(site.namesrv.address) as admin:
            await admin.create_topic(site.broker.address, TopicConfig(name, queues, queues), attributes)
            while True:
                try:
                    await admin.topic_route(name)
                    return
                except TopicNotExistError:
                    await asyncio.sleep(0.05)

    loop_thread.run(create(), timeout=30)
    return name


def test_cluster_page_lists_the_broker(site: Site, page: Page, tmp_path: Path) -> None:
    page.goto(site.writable + "/")
    row = page.locator("#brokers tbody tr").first
    assert row.locator("td").nth(1).inner_text() == "broker-a"
    assert row.locator("td").nth(3).inner_text() == site.broker.address
    assert page.locator(".mode").inner_text() == "writes allowed"
    shot(page, tmp_path, "cluster")
    page.click(f"text={site.broker.address}")
    status = dict(r.locator("td").all_inner_texts() for r in page.locator("#status tbody tr").all())
    assert status["brokerVersionDesc"].startswith("sparkmq") and "putTps" in status
    config = dict(r.locator("td").all_inner_texts() for r in page.locator("#config tbody tr").all())
    assert config["brokerName"] == "broker-a"
    shot(page, tmp_path, "broker")


def test_send_a_test_message_then_find_it_by_key_and_id(site: Site, page: Page, tmp_path: Path) -> None:
    topic = _topic(site)
    page.goto(site.writable + "/send")
    page.fill("input[name=topic]", topic)
    page.fill("input[name=keys]", "order-42")
    page.fill("textarea[name=body]", '{"order": 42, "note": "from the dashboard"}')
    page.click("button[type=submit]")
    sent = page.locator("#sent").inner_text()
    assert sent.startswith("Sent: SEND_OK msgId ")
    msg_id = page.locator("#sent code").inner_text()
    shot(page, tmp_path, "sent")

    page.goto(site.writable + "/messages")
    page.fill("input[name=topic]", topic)
    page.fill("input[name=key]", "order-42")
    page.click("button[type=submit]")
    cells = page.locator("#messages tbody tr").first.locator("td").all_inner_texts()
    assert cells[0] == msg_id and cells[5] == "order-42" and cells[7] == '{"order": 42, "note": "from the dashboard"}'
    shot(page, tmp_path, "messages-by-key")

    page.click("text=Messages")
    page.fill("input[name=topic]", topic)
    page.fill("input[name=msgId]", msg_id)
    page.click("button[type=submit]")
    assert page.locator("#messages tbody tr").count() == 1
    assert page.locator("#messages tbody td").first.inner_text() == msg_id


def test_topic_page_shows_per_queue_offsets(site: Site, page: Page, tmp_path: Path, clients: Clients) -> None:
    topic = _topic(site, queues=2)
    producer = clients.producer("PID_dash", site.namesrv.address)
    for i in range(5):
        producer.send(Message(topic, f"m{i}".encode()), queue=None)
    page.goto(site.writable + "/topics")
    page.click(f"text={topic}")
    rows = [r.locator("td").all_inner_texts() for r in page.locator("#queues tbody tr").all()]
    assert [(r[0], r[1], r[2]) for r in rows] == [("broker-a", "0", "0"), ("broker-a", "1", "0")]
    assert sum(int(r[3]) for r in rows) == 5
    assert float(page.locator(".tps").first.inner_text()) > 0
    shot(page, tmp_path, "topic")


def test_a_table_enabled_topics_page_shows_its_table_lag(
    site: Site, page: Page, tmp_path: Path, clients: Clients
) -> None:
    topic = _topic(site, queues=2, attributes="+table.enable=true")
    producer = clients.producer("PID_dash_table", site.namesrv.address)
    for i in range(4):
        producer.send(Message(topic, f"m{i}".encode()), queue=None)

    def caught_up() -> bool:
        page.goto(site.writable + f"/topics/{topic}")
        rows = [r.locator("td").all_inner_texts() for r in page.locator("#table-lag tbody tr").all()]
        return len(rows) == 2 and sum(int(r[2]) for r in rows) == 4 and all(r[4] == "0" for r in rows)

    assert wait_until(caught_up, 30)
    assert page.locator(".table-state").first.inner_text() == "ok"
    shot(page, tmp_path, "topic-table")
    page.goto(site.writable + f"/topics/{_topic(site)}")
    assert page.locator("#table-lag").count() == 0  # a plain topic has no table section


def test_group_page_shows_lag_per_queue_and_a_lag_chart(
    site: Site, page: Page, tmp_path: Path, clients: Clients
) -> None:
    topic, group = _topic(site, queues=1), f"CID_{uuid.uuid4().hex[:8]}"
    producer = clients.producer("PID_dash", site.namesrv.address)
    for i in range(10):
        producer.send(Message(topic, f"m{i}".encode()))
    consumer = clients.pull(group, site.namesrv.address)
    queue = consumer.queues_of(topic)[0]
    consumer.assign([queue])
    got = []
    while len(got) < 4:
        got += consumer.poll(5.0, max_messages=4 - len(got))
    consumer.commit()

    page.goto(site.writable + f"/groups/{group}")
    assert page.locator("#total-lag").inner_text() == "6"
    row = page.locator("#lag tbody tr").first.locator("td").all_inner_texts()
    assert row == [topic, "broker-a", "0", "10", "4", "6"]

    def chart_has_a_line() -> bool:
        page.reload()
        return page.locator("svg.chart polyline").count() == 1 and page.locator("svg.chart circle").count() >= 2

    assert wait_until(chart_has_a_line, 30), "the lag chart never got two samples"
    clients_text = page.locator("#clients").inner_text()  # the members table, or the broker's "not online" remark
    assert consumer._async.instance.client_id in clients_text or "not online" in clients_text
    shot(page, tmp_path, "group-lag")
    page.goto(site.writable + "/groups")
    assert group in page.locator("#groups").inner_text()
    shot(page, tmp_path, "groups")


def test_a_pop_group_is_listed_before_any_redelivery(site: Site, page: Page, tmp_path: Path, clients: Clients) -> None:
    topic, group = _topic(site, queues=1), f"CID_POP_{uuid.uuid4().hex[:8]}"
    producer = clients.producer("PID_dash", site.namesrv.address)
    for i in range(3):
        producer.send(Message(topic, f"p{i}".encode()))

    async def pop_one() -> None:
        client = RemotingClient()
        try:
            born = int(time.time() * 1000)
            header = PopMessageRequestHeader(group, topic, -1, 1, 60_000, 0, born, 0, "TAG", "*").to_fields()
            popped = await client.invoke(site.broker.address, RequestCode.POP_MESSAGE, header, b"", 10)
            assert popped.code == ResponseCode.SUCCESS, popped.remark
        finally:
            await client.close()

    loop_thread.run(pop_one(), timeout=30)
    page.goto(site.writable + "/groups")
    assert group in page.locator("#groups").inner_text()  # no %RETRY% topic yet: listed from the broker's groups
    page.goto(site.writable + f"/groups/{group}")
    row = page.locator("#lag tbody tr").first.locator("td").all_inner_texts()
    assert row[:4] == [topic, "broker-a", "0", "3"]
    shot(page, tmp_path, "pop-group")


def test_a_read_only_dashboard_refuses_to_send(site: Site, page: Page, tmp_path: Path) -> None:
    page.goto(site.read_only + "/send")
    assert page.locator(".mode").inner_text() == "read-only"
    assert "--access-key/--secret-key (ACL) or --allow-writes" in page.locator(".readonly").inner_text()
    assert page.locator("textarea").count() == 0
    refused = page.request.post(site.read_only + "/send", form={"topic": "T", "body": "x"})
    assert refused.status == 403
    shot(page, tmp_path, "read-only")


def test_message_page_shows_the_message_trace_and_names_a_damaged_one(
    site: Site, page: Page, tmp_path: Path, clients: Clients
) -> None:
    topic = _topic(site, queues=1)
    got: list[str] = []

    def consume(message: ReceivedMessage) -> ConsumeResult:
        got.append(message.msg_id)
        return ConsumeResult.SUCCESS

    clients.push("CID_dash_trace", site.namesrv.address, topic, consume, enable_msg_trace=True)
    producer = clients.producer("PID_dash_trace", site.namesrv.address, enable_msg_trace=True)
    msg_id = producer.send(Message(topic, b"traced", tags="books")).msg_id
    url = site.writable + f"/messages?topic={topic}&msgId={msg_id}"

    def trace_types() -> list[str]:
        page.goto(url)
        return sorted(page.locator("#trace tbody tr td:first-child").all_inner_texts())

    assert wait_until(lambda: trace_types() == ["Pub", "SubAfter", "SubBefore"], 30), trace_types()
    pub = page.locator("#trace tbody tr", has_text="Pub").locator("td").all_inner_texts()
    assert pub[:2] == ["Pub", "PID_dash_trace"] and pub[5] == "success" and pub[6] == f"{topic} Normal_Msg"
    shot(page, tmp_path, "message-trace")

    vandal = clients.producer("PID_dash_vandal", site.namesrv.address)
    vandal.send(Message("RMQ_SYS_TRACE_TOPIC", b"SubAfter\x01broken\x02", keys=[msg_id]))
    assert wait_until(lambda: page.goto(url) is not None and page.locator(".damaged").count() == 1, 30)
    assert "SubAfter trace record has 2 fields" in page.locator(".damaged").inner_text()
    assert page.locator("#trace tbody tr").count() == 3  # the good records still show

    response = page.goto(url + "&traceTopic=NO_SUCH_TRACE_TOPIC")
    assert response is not None and response.status == 200
    assert "No trace" in page.locator(".no-trace").inner_text()


def test_an_unknown_topic_is_an_error_page_not_a_crash(site: Site, page: Page) -> None:
    response = page.goto(site.writable + "/topics/NoSuchTopic")
    assert response is not None and response.status == 502
    assert "No topic route info" in page.locator(".error").inner_text()


@pytest.fixture
def clients() -> Iterator[Clients]:
    opened = Clients()
    try:
        yield opened
    finally:
        opened.close_all()
