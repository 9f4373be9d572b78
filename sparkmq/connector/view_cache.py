"""One view of a cluster per (NameServer, consumer group, security) and process, kept for reuse.

Spark calls a source's methods many times per query (and executors read many ranges), each from
a fresh object; the views behind them (``DriverView``, ``BrokerView``) hold connections worth
keeping. :class:`ViewCache` creates each on first use and, at interpreter exit, hands each to
``on_exit`` (closing its sockets rather than leaving them to the collector, which warns).
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Callable
from typing import Generic, TypeVar

from sparkmq.client.security import ClientSecurity

V = TypeVar("V")
ViewKey = tuple[str, str, ClientSecurity | None]


class ViewCache(Generic[V]):
    """Views made by ``make(namesrv_addr, group, security)``, one per key, thread-safe."""

    def __init__(self, make: Callable[[str, str, ClientSecurity | None], V], on_exit: Callable[[V], None]) -> None:
        self._make = make
        self._on_exit = on_exit
        self._views: dict[ViewKey, V] = {}
        self._lock = threading.Lock()
        atexit.register(self._at_exit)

    def get(self, namesrv_addr: str, group: str, security: ClientSecurity | None = None) -> V:
        """The view for this key, made on the first call."""
        key = (namesrv_addr, group, security)
        with self._lock:
            view = self._views.get(key)
            if view is None:
                view = self._views[key] = self._make(namesrv_addr, group, security)
            return view

    def take_all(self) -> list[V]:
        """Every cached view, forgotten by the cache (the caller closes them)."""
        with self._lock:
            views, self._views = list(self._views.values()), {}
        return views

    def _at_exit(self) -> None:
        with self._lock:
            views = list(self._views.values())
        for view in views:
            self._on_exit(view)
