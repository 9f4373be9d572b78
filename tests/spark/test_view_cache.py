"""ViewCache: one view per (NameServer, group, security) and process, made once even under races."""

from __future__ import annotations

import threading
import time

import pytest

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


class _Clock:
    """A clock the test moves: sweeps see exactly the idle time it says (the timer thread, waiting
    ``idle_s`` real seconds, never fires during the test)."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _leasing_cache(
    idle_s: float, gone: threading.Event | None = None, clock: _Clock | None = None
) -> tuple[ViewCache[_View], list[_View]]:
    closed: list[_View] = []

    def close(view: _View) -> None:
        view.close()
        closed.append(view)
        if gone is not None:
            gone.set()

    cache = ViewCache(_View, _View.close, close_idle=close, idle_s=idle_s, clock=clock or time.monotonic)
    return cache, closed


def test_a_leased_view_is_closed_only_when_no_lease_holds_it_and_a_pinned_one_never() -> None:
    clock = _Clock()
    cache, closed = _leasing_cache(idle_s=60.0, clock=clock)
    pinned = cache.get("ns:9876", "kept")
    with cache.lease("ns:9876", "g1") as first, cache.lease("ns:9876", "g1") as again:
        assert again is first
        clock.now += 120
        assert cache.sweep() == [] and not first.closed  # leased: in use, whatever its age
    with cache.lease("ns:9876", "g1") as still:
        assert still is first  # released and taken again before any sweep: the same view
    clock.now += 59
    assert cache.sweep() == [] and not first.closed  # idle, but not for idle_s yet
    clock.now += 1
    assert cache.sweep() == [first] and first.closed and closed == [first]
    assert not pinned.closed and cache.get("ns:9876", "kept") is pinned
    with cache.lease("ns:9876", "g1") as fresh:
        assert fresh is not first and not fresh.closed  # the key's next lease makes a new view


def test_a_view_left_idle_is_closed_by_the_cache_itself() -> None:
    gone = threading.Event()
    cache, closed = _leasing_cache(idle_s=0.05, gone=gone)
    with cache.lease("ns:9876", "g1") as view:
        pass
    assert gone.wait(10), "the idle view was never closed"
    assert view.closed and closed == [view] and cache.take_all() == []


def test_get_only_caches_refuse_leases() -> None:
    cache: ViewCache[_View] = ViewCache(_View, _View.close)
    with pytest.raises(TypeError, match="close_idle"), cache.lease("ns:9876", "g1"):
        pass


def test_a_view_that_fails_to_close_does_not_keep_the_other_idle_ones_open(caplog: pytest.LogCaptureFixture) -> None:
    closed: list[str] = []

    def close(view: _View) -> None:
        if view.key[1] == "broken":
            raise OSError("its loop is gone")
        closed.append(view.key[1])

    clock = _Clock()
    cache: ViewCache[_View] = ViewCache(_View, _View.close, close_idle=close, idle_s=60.0, clock=clock)
    for group in ("broken", "fine"):
        with cache.lease("ns:9876", group):
            pass
    clock.now += 60
    assert len(cache.sweep()) == 2
    assert closed == ["fine"] and cache.cached_keys() == []
    assert "closing an idle view failed" in caplog.text
