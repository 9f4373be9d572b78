"""Range reads of a Spark task at the broker addresses the driver planned: no client, no NameServer.

A task pulls over a blocking socket of its own (``direct_pull``), or reads the broker's store files
when it runs beside the broker (``local_reads``); ``pipelined`` keeps a few pulls in flight while
the task decodes. Only what these need is imported here: the client (``broker_view``), asyncio and
its loop thread stay out of Spark's Python workers unless a read falls back to them, which keeps
the workers' heaps, and PySpark's ``gc.collect()`` after every task, smaller.
"""

from __future__ import annotations

import atexit
import logging
import threading
from collections import deque
from collections.abc import Generator, Iterable, Iterator
from typing import Any

from sparkmq.client.pull_wire import PULL_TIMEOUT_MARGIN_S, PullResult, decode_pull, pull_request_fields
from sparkmq.client.security import ClientSecurity
from sparkmq.client.selector import MessageSelector
from sparkmq.connector.direct_pull import PullConnection, PullConnectionError
from sparkmq.connector.local_reads import LocalQueueReads, LocalReadDeclined, proven, store_files, usable
from sparkmq.errors import DataLossError
from sparkmq.protocol import ResponseCode
from sparkmq.protocol.bodies import MessageQueue

logger = logging.getLogger(__name__)
# Pulls in flight per range read: enough that a task decoding 4096 records in ~0.4 ms never waits
# for the broker's next answer (one pull costs the broker ~1.5 ms), few enough to bound memory
# (each answer holds up to pullBatchSize records, ~1 MiB for 4096 of 250 bytes).
PULLS_AHEAD = 4


def pipelined(
    pulls: Pulls, queue: MessageQueue, start: int, end: int, batch_size: int, fail_on_data_loss: bool
) -> Iterator[tuple[bytes | memoryview | None, int | None]]:
    """Each pull's body (or None) and the offset after it, in offset order (None: the range stops early).

    Up to ``PULLS_AHEAD`` pulls are on their way while the caller decodes a body: the broker's
    work, the transfer and the task's overlap. Each is sent where the previous one is expected
    to end (its start plus the last pull's advance); a pull whose start turns out wrong (a
    shorter answer: a filter, the broker's byte limit) is dropped with those after it and sent
    again from the right offset.
    """
    stride, following = batch_size, start  # the predicted advance of a pull; where the next one goes

    def pull_ahead() -> None:
        nonlocal following
        while len(pulls.pending) < PULLS_AHEAD and following < end:
            count = min(batch_size, end - following)
            pulls.send(following, count)
            following += min(stride, count)

    pull_ahead()
    while pulls.pending:
        offset = pulls.pending[0][0]
        body, advanced_to = _step(queue, offset, end, *pulls.result(), fail_on_data_loss)
        if advanced_to is None:
            yield body, None
            return
        if advanced_to != (pulls.pending[0][0] if pulls.pending else following):  # mispredicted: send again
            pulls.drop_all()
            following = advanced_to
        if advanced_to > offset:
            stride = advanced_to - offset
        pull_ahead()
        yield body, advanced_to


def _step(
    queue: MessageQueue,
    offset: int,
    end: int,
    result: PullResult,
    body: bytes | memoryview,
    fail_on_data_loss: bool,
) -> tuple[bytes | memoryview | None, int | None]:
    """One pull's outcome: the body to hand on (or None) and the offset to pull next (None: stop)."""
    if result.status == ResponseCode.PULL_OFFSET_MOVED or (result.found is False and result.min_offset > offset):
        where = f"queue {queue.topic}/{queue.broker_name}/{queue.queue_id}"
        lost = (
            f"{where} offsets [{offset}, {min(result.min_offset, end)}) are gone "
            f"(the broker's minimum is {result.min_offset}: deleted by retention)"
        )
        if fail_on_data_loss:
            raise DataLossError(lost + "; set failOnDataLoss=false to skip them")
        return None, max(result.min_offset, offset + 1) if result.min_offset > offset else result.next_begin_offset
    stalled = result.status == ResponseCode.PULL_RETRY_IMMEDIATELY and result.next_begin_offset <= offset
    if result.status == ResponseCode.PULL_NOT_FOUND or stalled:  # a slave answers past its end with a retry
        if fail_on_data_loss:
            raise DataLossError(
                f"queue {queue.topic}/{queue.broker_name}/{queue.queue_id} ends at "
                f"{result.max_offset}, before the planned end {end} (offsets went backwards)"
            )
        return None, None
    if result.status == ResponseCode.PULL_RETRY_IMMEDIATELY:  # only filtered-out records
        return None, result.next_begin_offset
    return body, result.next_begin_offset


class Pulls:
    """Pulls of one queue in flight, oldest first: ``pending`` holds (start offset, handle)."""

    def __init__(self, queue: MessageQueue, expression: str | MessageSelector) -> None:
        self.queue, self.expression = queue, expression
        self.pending: deque[tuple[int, Any]] = deque()

    def send(self, offset: int, count: int) -> None:
        raise NotImplementedError

    def result(self) -> tuple[PullResult, bytes | memoryview]:
        """The oldest pull's result and its body (it leaves ``pending``)."""
        raise NotImplementedError

    def drop_all(self) -> None:
        raise NotImplementedError


class SocketPulls(Pulls):
    """Over the task thread's own socket (``direct_pull.PullConnection``); the broker each answer
    suggests for the queue's next pull goes into ``suggestions`` (the client's) when given."""

    def __init__(
        self,
        group: str,
        connection: PullConnection,
        queue: MessageQueue,
        expression: str | MessageSelector,
        suggestions: dict[MessageQueue, int] | None = None,
    ) -> None:
        super().__init__(queue, expression)
        self.group, self.connection, self.suggestions = group, connection, suggestions

    def send(self, offset: int, count: int) -> None:
        fields = pull_request_fields(self.group, self.queue, offset, count, 0.0, self.expression)
        self.pending.append((offset, self.connection.send(fields)))

    def result(self) -> tuple[PullResult, bytes | memoryview]:
        offset, opaque = self.pending.popleft()
        command, body = self.connection.answer(opaque)
        result, suggested = decode_pull(self.queue, offset, command)
        if self.suggestions is not None:
            self.suggestions[self.queue] = suggested
        return result, body

    def drop_all(self) -> None:
        for _, opaque in self.pending:
            self.connection.forget(opaque)
        self.pending.clear()


# -- reading at planned addresses, no client -----------------------------------------------------
class PullSockets:
    """This process's idle direct pull sockets between range reads, per (address, security).

    Shared by every group and by both read paths (``BrokerView.read_range``, ``read_planned``):
    a PULL_MESSAGE names its group, so a socket serves any of them.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[tuple[str, ClientSecurity | None], list[PullConnection]] = {}

    def lend(self, addresses: list[str], security: ClientSecurity | None) -> PullConnection | None:
        """An idle live socket to the first address that has one or connects; None when none does."""
        for address in addresses:
            with self._lock:
                idle = self._idle.get((address, security)) or []
                while idle:
                    kept = idle.pop()
                    if kept.alive():
                        return kept
                    kept.close()
            try:
                return PullConnection(address, security, PULL_TIMEOUT_MARGIN_S)
            except PullConnectionError as exc:
                logger.info("%s", exc.remark)
        return None

    def give_back(self, connection: PullConnection, security: ClientSecurity | None, broken: bool) -> None:
        """Keep ``connection`` for the next read, unless it broke or is no longer usable."""
        if not broken and connection.usable:
            with self._lock:
                self._idle.setdefault((connection.address, security), []).append(connection)
                return
        connection.close()

    def idle(self) -> list[PullConnection]:
        """The sockets kept now (for tests and benches)."""
        with self._lock:
            return [c for connections in self._idle.values() for c in connections]

    def close_idle(self) -> None:
        """Close the kept sockets; a range read still running keeps (or closes) its own when done."""
        with self._lock:
            idle = [c for connections in self._idle.values() for c in connections]
            self._idle.clear()
        for connection in idle:
            connection.close()


pull_sockets = PullSockets()
atexit.register(pull_sockets.close_idle)


def read_planned(
    group: str,
    queue: MessageQueue,
    addresses: Iterable[str],
    start: int,
    end: int,
    batch_size: int,
    expression: str | MessageSelector = "*",
    fail_on_data_loss: bool = True,
    security: ClientSecurity | None = None,
    local_reads: bool = True,
) -> Generator[bytes | memoryview, None, int | None]:
    """``BrokerView.read_range`` at the addresses the driver planned (master first, then slaves):
    no client, no NameServer. Returns None when the range is read (or stopped early as the view's
    read does), else the offset from which the caller reads the rest through ``view_for``: when no
    address connects, or the connection breaks (the broker moved, stopped, or closed it).

    With ``local_reads`` the records come from the broker's store files when this process runs
    beside it (``local_reads.py``); the rest of the range, from wherever those decline, is pulled.
    Sockets are kept per address for the process, shared by all groups (pull requests name the group).
    """
    connection = pull_sockets.lend(list(addresses), security)
    if connection is None:
        return start
    pulls = SocketPulls(group, connection, queue, expression)
    position: int | None = start
    broken = False
    try:
        first = start
        if local_reads and usable(expression) and (files := store_files(connection)):
            with LocalQueueReads(files, queue.topic, queue.queue_id) as reads:
                if proven(connection, reads, group, queue, start):
                    rest = yield from _read_locally(reads, queue, start, end, batch_size)
                    if rest is None:
                        return None
                    first = position = rest
        for body, position in pipelined(pulls, queue, first, end, batch_size, fail_on_data_loss):  # noqa: B007
            if body is not None:
                yield body
        return None
    except PullConnectionError as exc:
        broken = True
        logger.warning("%s; reading %s from offset %d through the client", exc.remark, queue, position)
        return position
    finally:
        pulls.drop_all()
        pull_sockets.give_back(connection, security, broken)


def _read_locally(
    reads: LocalQueueReads, queue: MessageQueue, start: int, end: int, batch_size: int
) -> Generator[bytes | memoryview, None, int | None]:
    """Bodies of [start, end) read from the store's files; returns None when all were read, else
    the offset from which the files declined (the caller pulls the rest, with the pulls' data-loss rules)."""
    offset = start
    try:
        while offset < end:
            body, following = reads.read(offset, min(batch_size, end - offset))
            if body is not None:  # None: only blank units
                yield body
            offset = following
        return None
    except LocalReadDeclined as exc:
        logger.info("%s of %s; pulling the rest from the broker", exc, queue)
        return offset
