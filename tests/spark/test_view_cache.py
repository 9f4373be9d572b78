"""ViewCache: one view per (NameServer, group, security) and process, made once even under races."""

from __future__ import annotations

import threading

from sparkmq.client.security import ClientSecurity
from sparkmq.connector.view_cache import ViewCache


class _View:
    def __init__(self, namesrv: str, group: str, security: ClientSecurity | None) -> None:
        self.key = (namesrv, group, security)
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_one_view_per_key_made_once_by_racing_threads_and_taken_all_at_once() -> None:
    cache: ViewCache[_View] = ViewCache(_View, _View.close)
    start, got = threading.Barrier(8), []

    def get() -> None:
        start.wait()
        got.append(cache.get("ns:9876", "g1"))

    threads = [threading.Thread(target=get) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len({id(view) for view in got}) == 1 and got[0].key == ("ns:9876", "g1", None)
    other = cache.get("ns:9876", "g2")
    assert other is not got[0] and cache.get("ns:9876", "g2") is other
    taken = cache.take_all()
    assert {id(view) for view in taken} == {id(got[0]), id(other)}
    assert cache.take_all() == []
    assert cache.get("ns:9876", "g1") is not got[0]  # forgotten: a new one is made


def test_at_exit_every_cached_view_is_handed_to_on_exit() -> None:
    cache: ViewCache[_View] = ViewCache(_View, _View.close)
    views = [cache.get("ns:9876", group) for group in ("a", "b")]
    cache._at_exit()
    assert all(view.closed for view in views)
