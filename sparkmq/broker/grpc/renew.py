"""Server-side auto-renew of a push consumer's popped messages (the proxy's ``ReceiptHandleProcessor``).

A ReceiveMessage with ``auto_renew`` leaves the invisible time to the server: while the client
is alive (its Telemetry stream open), each message it holds is made invisible again shortly
before its deadline. The client keeps the handle it received; acks, changes and DLQ forwards
name the message by that handle, which :meth:`AutoRenew.current` maps to the latest one.
"""

from __future__ import annotations

import heapq
import logging
import time
from dataclasses import dataclass

from sparkmq.broker.grpc.backend import Backend
from sparkmq.broker.pop import ReceiptHandle
from sparkmq.errors import InvalidReceiptHandleError, OffsetStoreError

logger = logging.getLogger(__name__)


@dataclass(slots=True)
class _Held:
    group: str
    topic: str
    client_id: str
    handle: str
    deadline_ms: int


class AutoRenew:
    """The auto-renewed messages of one endpoint, by the handle their client holds."""

    def __init__(self, backend: Backend, invisible_ms: int) -> None:
        self.backend = backend
        self.invisible_ms = invisible_ms
        self.ahead_ms = invisible_ms // 3  # renewed once less than a third of the time is left
        self._held: dict[str, _Held] = {}
        self._due: list[tuple[int, str]] = []  # (deadline, client's handle) heap; released ones linger
        self.live_clients: dict[str, int] = {}  # client id -> open Telemetry streams

    def hold(self, group: str, topic: str, client_id: str, handle: ReceiptHandle) -> None:
        text = handle.encode()
        self._held[text] = _Held(group, topic, client_id, text, handle.deadline_ms)
        heapq.heappush(self._due, (handle.deadline_ms, text))

    def current(self, handle: str) -> str:
        """The live handle of the message the client's ``handle`` names (itself when not renewed)."""
        held = self._held.get(handle)
        return handle if held is None else held.handle

    def release(self, handle: str) -> None:
        """The client acked, changed or forwarded the message: no more renewals."""
        self._held.pop(handle, None)

    def release_client(self, client_id: str) -> None:
        for key in [k for k, held in self._held.items() if held.client_id == client_id]:
            del self._held[key]

    async def renew_due(self) -> int:
        """Renew every held message of a live client close to its deadline; returns how many. When the
        journal loses the renewals, the messages keep their old handles (live again) and are tried next round."""
        now = int(time.time() * 1000)
        renewed: list[tuple[str, _Held, str, int]] = []  # client's handle, the message, its former handle, deadline
        while self._due and self._due[0][0] - now <= self.ahead_ms:
            deadline, key = heapq.heappop(self._due)
            held = self._held.get(key)
            if held is None or held.deadline_ms != deadline:
                continue  # released, or renewed since
            if not self.live_clients.get(held.client_id):
                del self._held[key]  # its client is gone: the message comes back at its deadline
                continue
            try:
                handle = await self.backend.change_invisible(held.group, held.topic, held.handle, self.invisible_ms)
            except InvalidReceiptHandleError as exc:
                logger.info("auto-renew of a message of group %s stopped: %s", held.group, exc.remark)
                del self._held[key]
                continue
            except OffsetStoreError:
                heapq.heappush(self._due, (deadline, key))
                break
            renewed.append((key, held, held.handle, held.deadline_ms))
            held.handle, held.deadline_ms = handle.encode(), handle.deadline_ms
        try:
            await self.backend.durable()
        except OffsetStoreError as exc:
            logger.warning("auto-renew of %d messages lost: %s", len(renewed), exc.remark)
            for _, held, former, deadline in renewed:
                held.handle, held.deadline_ms = former, deadline
        for key, held, _, _ in renewed:
            heapq.heappush(self._due, (held.deadline_ms, key))
        if len(self._due) > 2 * len(self._held) + 1024:
            self._due = [(held.deadline_ms, key) for key, held in self._held.items()]
            heapq.heapify(self._due)
        return len(renewed)
