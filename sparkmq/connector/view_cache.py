"""One view of a cluster per (NameServer, consumer group, security) and process, kept for reuse.

Spark calls a source's methods many times per query (and executors read many ranges), each from
a fresh object; the views behind them (``DriverView``, ``BrokerView``) hold connections worth
keeping. :class:`ViewCache` creates each on first use and, at interpreter exit, hands each to
``on_exit`` (closing its sockets rather than leaving them to the collector, which warns).

Views taken with :meth:`ViewCache.lease` (and never with :meth:`ViewCache.get`, which keeps a
view for the process's life) are also closed when no lease has used them for ``idle_s`` seconds.
Spark's Python workers live across queries, and a view with a client behind it (heartbeats, route
refreshes) would otherwise go on talking to a cluster long after the last query that needed it (or
after that cluster is gone), one client per consumer group ever read.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Generic, TypeVar

from sparkmq.client.security import ClientSecurity

logger = logging.getLogger(__name__)
V = TypeVar("V")
ViewKey = tuple[str, str, ClientSecurity | None]


@dataclass(eq=False)
class _Entry(Generic[V]):
    view: V
    leases: int = 0
    pinned: bool = False  # taken with get(): kept for the process's life
    released_at: float = 0.0  # set when a lease ends; a view taken by get() is pinned instead


class ViewCache(Generic[V]):
    """Views made by ``make(namesrv_addr, group, security)``, one per key, thread-safe.

    ``close_idle`` (with ``idle_s``) closes a leased view nobody has leased for ``idle_s`` seconds
    of ``clock``, on a timer thread; the next lease of its key makes a new one.
    """

    def __init__(
        self,
        make: Callable[[str, str, ClientSecurity | None], V],
        on_exit: Callable[[V], None],
        *,
        close_idle: Callable[[V], None] | None = None,
        idle_s: float = 20.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._make = make
        self._on_exit = on_exit
        self._close_idle = close_idle
        self.idle_s = idle_s
        self._clock = clock
        self._entries: dict[ViewKey, _Entry[V]] = {}
        self._lock = threading.Lock()
        self._sweeper: threading.Timer | None = None
        atexit.register(self._at_exit)

    def _entry(self, key: ViewKey) -> _Entry[V]:
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(self._make(*key))
        return entry

    def get(self, namesrv_addr: str, group: str, security: ClientSecurity | None = None) -> V:
        """The view for this key, made on the first call and kept for the process's life."""
        with self._lock:
            entry = self._entry((namesrv_addr, group, security))
            entry.pinned = True
            return entry.view

    @contextmanager
    def lease(self, namesrv_addr: str, group: str, security: ClientSecurity | None = None) -> Iterator[V]:
        """The view for this key while the ``with`` block runs; closed once idle for ``idle_s``."""
        if self._close_idle is None:
            raise TypeError("this ViewCache has no close_idle: use get()")
        with self._lock:
            entry = self._entry((namesrv_addr, group, security))
            entry.leases += 1
        try:
            yield entry.view
        finally:
            with self._lock:
                entry.leases -= 1
                entry.released_at = self._clock()
                self._schedule_sweep(self.idle_s)

    def _schedule_sweep(self, delay_s: float) -> None:
        if self._sweeper is None:
            self._sweeper = threading.Timer(delay_s, self.sweep)
            self._sweeper.daemon = True
            self._sweeper.start()

    def sweep(self) -> list[V]:
        """Close (and forget) the views idle for ``idle_s`` or more; the views closed."""
        now = self._clock()
        with self._lock:
            self._sweeper = None
            unused = {k: e for k, e in self._entries.items() if not e.leases and not e.pinned}
            idle = [k for k, e in unused.items() if now - e.released_at >= self.idle_s]
            closing = [self._entries.pop(key).view for key in idle]
            waiting = [e.released_at for k, e in unused.items() if k not in idle]
            if waiting:
                self._schedule_sweep(max(min(waiting) + self.idle_s - now, 0.0))
        for view in closing:
            assert self._close_idle is not None
            try:
                self._close_idle(view)
            except Exception:  # one view that fails to close must not keep the others open
                logger.exception("closing an idle view failed; it is forgotten all the same")
        return closing

    def cached_keys(self) -> list[ViewKey]:
        """The keys of the views cached now."""
        with self._lock:
            return list(self._entries)

    def take_all(self) -> list[V]:
        """Every cached view, forgotten by the cache (the caller closes them)."""
        with self._lock:
            entries, self._entries = list(self._entries.values()), {}
        return [entry.view for entry in entries]

    def _at_exit(self) -> None:
        with self._lock:
            views = [entry.view for entry in self._entries.values()]
            if self._sweeper is not None:
                self._sweeper.cancel()
        for view in views:
            self._on_exit(view)
