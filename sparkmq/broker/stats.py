"""BrokerStats: RocketMQ's ``BrokerStatsManager`` counters at the cost of a few int additions.

The send and pull processors call :meth:`BrokerStats.put` / :meth:`BrokerStats.get` once per
request batch; those add to plain dicts and ints. Everything else (TPS, minute/hour/day windows,
the runtime-info keys, Prometheus) is derived when asked, from snapshots a background tick takes
(:meth:`sample`, every :data:`SAMPLE_INTERVAL_S`), so the hot path never formats or locks.

Stats names and keys are Java's: ``TOPIC_PUT_NUMS``/``TOPIC_PUT_SIZE`` keyed by topic,
``GROUP_GET_NUMS``/``GROUP_GET_SIZE`` keyed ``topic@group``, ``BROKER_PUT_NUMS``/``BROKER_GET_NUMS``
keyed by the cluster name.

>>> stats = BrokerStats(clock=lambda: 0.0)
>>> stats.put("orders", 3, 300); stats.get("billing", "orders", 2, 200)
>>> stats.view("TOPIC_PUT_NUMS", "orders").stats_minute.sum
3
>>> stats.view("GROUP_GET_NUMS", "orders@billing").stats_minute.sum
2
"""

from __future__ import annotations

import asyncio
import bisect
import functools
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sparkmq.protocol.ops_bodies import BrokerStatsData, BrokerStatsItem

SAMPLE_INTERVAL_S = 10.0  # StatsItem samples every 10 s for its minute window
MINUTE_SAMPLES = 7  # a minute window is 6 intervals: 7 samples
HOUR_SAMPLES = 61  # one sample a minute
DAY_SAMPLES = 25  # one sample an hour
# RocketMQ 5's rocketmq_rpc_latency buckets (RemotingMetricsManager), milliseconds.
RPC_LATENCY_BUCKETS_MS = (1.0, 3.0, 5.0, 7.0, 10.0, 100.0, 1000.0, 2000.0, 3000.0)
STATS_NAMES = (
    "TOPIC_PUT_NUMS",
    "TOPIC_PUT_SIZE",
    "GROUP_GET_NUMS",
    "GROUP_GET_SIZE",
    "BROKER_PUT_NUMS",
    "BROKER_GET_NUMS",
)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """Every counter at one instant (copies, safe to read later)."""

    at: float
    totals: tuple[int, int, int, int]  # put messages, put bytes, got messages, got bytes
    topic_put: dict[str, tuple[int, int]]
    group_get: dict[tuple[str, str], tuple[int, int]]


class BrokerStats:
    """Per-topic and per-group put/get counters with minute/hour/day windows."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.put_nums = 0
        self.put_bytes = 0
        self.get_nums = 0
        self.get_bytes = 0
        self.topic_put_nums: dict[str, int] = {}
        self.topic_put_bytes: dict[str, int] = {}
        self.group_get_nums: dict[tuple[str, str], int] = {}  # by (topic, group)
        self.group_get_bytes: dict[tuple[str, str], int] = {}
        # (request code, response code) -> [count per bucket (+Inf last)..., sum of ms]
        self.rpc_latency: dict[tuple[int, int], list[float]] = {}
        self.started = clock()
        self.started_wall = time.time()
        self._minute: deque[Snapshot] = deque(maxlen=MINUTE_SAMPLES)
        self._hour: deque[Snapshot] = deque(maxlen=HOUR_SAMPLES)
        self._day: deque[Snapshot] = deque(maxlen=DAY_SAMPLES)
        self._morning = {"today": (0, 0), "yesterday": (0, 0)}  # (puts, gets) at local midnight
        self._day_of_morning = time.localtime().tm_yday
        self.sample()

    # -- the hot path: one call per request batch ------------------------------------------
    def put(self, topic: str, messages: int, size: int) -> None:
        """``messages`` stored for ``topic`` (``size`` bytes of body)."""
        self.put_nums += messages
        self.put_bytes += size
        self.topic_put_nums[topic] = self.topic_put_nums.get(topic, 0) + messages
        self.topic_put_bytes[topic] = self.topic_put_bytes.get(topic, 0) + size

    def get(self, group: str, topic: str, messages: int, size: int) -> None:
        """``messages`` handed to ``group`` from ``topic`` (``size`` bytes)."""
        self.get_nums += messages
        self.get_bytes += size
        key = (topic, group)
        self.group_get_nums[key] = self.group_get_nums.get(key, 0) + messages
        self.group_get_bytes[key] = self.group_get_bytes.get(key, 0) + size

    def rpc(self, request_code: int, response_code: int, elapsed_ms: float) -> None:
        """One request served in ``elapsed_ms`` (a bucket increment and a sum)."""
        key = (request_code, response_code)
        row = self.rpc_latency.get(key)
        if row is None:
            row = self.rpc_latency[key] = [0.0] * (len(RPC_LATENCY_BUCKETS_MS) + 2)
        row[bisect.bisect_left(RPC_LATENCY_BUCKETS_MS, elapsed_ms)] += 1
        row[-1] += elapsed_ms

    def rpc_many(
        self,
        request_code: int,
        response_code: int,
        elapsed_ms: float,
        count: int,
        puts: Sequence[tuple[str, int, int]] = (),
    ) -> None:
        """``count`` requests served together in ``elapsed_ms`` (each counted with that latency), and
        ``put`` of each (topic, messages, body bytes) of ``puts`` (a lane's counting in one call)."""
        if puts:
            nums, sizes = self.topic_put_nums, self.topic_put_bytes
            for topic, messages, size in puts:  # put's work, without a call per topic
                self.put_nums += messages
                self.put_bytes += size
                nums[topic] = nums.get(topic, 0) + messages
                sizes[topic] = sizes.get(topic, 0) + size
        key = (request_code, response_code)
        row = self.rpc_latency.get(key)
        if row is None:
            row = self.rpc_latency[key] = [0.0] * (len(RPC_LATENCY_BUCKETS_MS) + 2)
        row[bisect.bisect_left(RPC_LATENCY_BUCKETS_MS, elapsed_ms)] += count
        row[-1] += elapsed_ms * count

    # -- derived, off the hot path ---------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """The counters now."""
        topic_put = {t: (n, self.topic_put_bytes.get(t, 0)) for t, n in self.topic_put_nums.items()}
        group_get = {k: (n, self.group_get_bytes.get(k, 0)) for k, n in self.group_get_nums.items()}
        return Snapshot(
            self.clock(), (self.put_nums, self.put_bytes, self.get_nums, self.get_bytes), topic_put, group_get
        )

    def sample(self) -> None:
        """Record a snapshot for the windows (the broker calls this every SAMPLE_INTERVAL_S)."""
        snap = self.snapshot()
        self._minute.append(snap)
        if not self._hour or snap.at - self._hour[-1].at >= 60:
            self._hour.append(snap)
        if not self._day or snap.at - self._day[-1].at >= 3600:
            self._day.append(snap)
        today = time.localtime().tm_yday
        if today != self._day_of_morning:
            self._morning = {"yesterday": self._morning["today"], "today": (self.put_nums, self.get_nums)}
            self._day_of_morning = today

    def tps(self) -> tuple[float, float, float, float]:
        """Put msgs/s, put bytes/s, get msgs/s, get bytes/s over the last minute window."""
        now, first = self.snapshot(), self._minute[0]
        elapsed = max(now.at - first.at, 1e-9)
        rates = ((a - b) / elapsed for a, b in zip(now.totals, first.totals, strict=True))
        return tuple(rates)  # type: ignore[return-value]  # as many rates as totals: the tuple's fixed length

    def topic_tps(self, topic: str) -> float:
        """Messages/s put to ``topic`` over the last minute window."""
        return self.view("TOPIC_PUT_NUMS", topic).stats_minute.tps

    def view(self, stats_name: str, stats_key: str) -> BrokerStatsData:
        """VIEW_BROKER_STATS_DATA: the named counter's minute, hour and day windows.

        Raises KeyError for a name sparkmq does not count.
        """
        pick = _PICKERS[stats_name]
        now = self.snapshot()
        return BrokerStatsData(
            *(_item(pick, stats_key, window[0], now) for window in (self._minute, self._hour, self._day))
        )

    def morning_totals(self) -> dict[str, int]:
        """The put/get totals at local midnight today and yesterday (clusterList -m's keys)."""
        return {
            "msgPutTotalYesterdayMorning": self._morning["yesterday"][0],
            "msgPutTotalTodayMorning": self._morning["today"][0],
            "msgPutTotalTodayNow": self.put_nums,
            "msgGetTotalYesterdayMorning": self._morning["yesterday"][1],
            "msgGetTotalTodayMorning": self._morning["today"][1],
            "msgGetTotalTodayNow": self.get_nums,
        }


def _split_group_key(key: str) -> tuple[str, str]:
    topic, _, group = key.partition("@")
    return topic, group


_Picker = Callable[[Snapshot, str], tuple[int, int]]  # (value, events) of one key in a snapshot
_PICKERS: dict[str, _Picker] = {
    "TOPIC_PUT_NUMS": lambda s, k: (s.topic_put.get(k, (0, 0))[0], 1),
    "TOPIC_PUT_SIZE": lambda s, k: (s.topic_put.get(k, (0, 0))[1], s.topic_put.get(k, (0, 0))[0]),
    "GROUP_GET_NUMS": lambda s, k: (s.group_get.get(_split_group_key(k), (0, 0))[0], 1),
    "GROUP_GET_SIZE": lambda s, k: (
        s.group_get.get(_split_group_key(k), (0, 0))[1],
        s.group_get.get(_split_group_key(k), (0, 0))[0],
    ),
    "BROKER_PUT_NUMS": lambda s, k: (s.totals[0], 1),
    "BROKER_GET_NUMS": lambda s, k: (s.totals[2], 1),
}


def _item(pick: _Picker, key: str, first: Snapshot, now: Snapshot) -> BrokerStatsItem:
    value_now, events_now = pick(now, key)
    value_then, events_then = pick(first, key)
    total = value_now - value_then
    events = events_now - events_then
    elapsed = max(now.at - first.at, 1e-9)
    return BrokerStatsItem(total, total / elapsed, total / events if events > 0 else 0.0)


SYSTEM_ERROR = 1  # ResponseCode.SYSTEM_ERROR: what the connection answers for a processor that raised


def timed(processor: Callable[..., Awaitable[Any]], code: int, stats: BrokerStats) -> Callable[..., Awaitable[Any]]:
    """``processor`` recording each request's latency and response code into ``stats.rpc`` (two clock reads).

    The processor's other public methods (a remoting server may look for extra entry points, such
    as one serving a run of requests together) are copied onto the wrapper unchanged, untimed.
    """
    clock, record = time.perf_counter, stats.rpc

    async def serve(request: Any, connection: Any) -> Any:
        start = clock()
        try:
            response = await processor(request, connection)
        except BaseException:
            record(code, SYSTEM_ERROR, (clock() - start) * 1000)
            raise
        record(code, response.code if response is not None else 0, (clock() - start) * 1000)
        return response

    for name in dir(processor):
        if not name.startswith("_") and callable(getattr(processor, name)):
            setattr(serve, name, getattr(processor, name))
    group = getattr(processor, "serve_group", None)
    if callable(group):
        serve.serve_group = _timed_group(group, code, stats)  # type: ignore[attr-defined]  # a function attribute
    return serve


def _timed_group(
    serve_group: Callable[[list[Any], Any], list[Any]], code: int, stats: BrokerStats
) -> Callable[[list[Any], Any], list[Any]]:
    """``serve_group`` recording each request's latency: answers given now at once, futures when
    they settle, coroutines (a parked pull) when they finish."""
    clock, record = time.perf_counter, stats.rpc

    def settle(start: float, future: asyncio.Future[Any]) -> None:
        failed = future.cancelled() or future.exception() is not None
        response = None if failed else future.result()
        record(code, SYSTEM_ERROR if failed else response.code if response is not None else 0, (clock() - start) * 1000)

    async def finish(start: float, answer: Awaitable[Any]) -> Any:
        try:
            response = await answer
        except BaseException:
            record(code, SYSTEM_ERROR, (clock() - start) * 1000)
            raise
        record(code, response.code if response is not None else 0, (clock() - start) * 1000)
        return response

    def serve(requests: list[Any], connection: Any) -> list[Any]:
        start = clock()
        answers = serve_group(requests, connection)
        elapsed = (clock() - start) * 1000
        timed_answers = []
        for answer in answers:
            if answer is None or hasattr(answer, "code"):
                record(code, answer.code if answer is not None else 0, elapsed)
            elif isinstance(answer, asyncio.Future):
                answer.add_done_callback(functools.partial(settle, start))
            else:
                answer = finish(start, answer)
            timed_answers.append(answer)
        return timed_answers

    return serve
