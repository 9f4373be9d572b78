"""A bounded spin: keep an event loop polling, not sleeping, for a short window after it read.

On a VM an idle vCPU halts, and waking it goes through the hypervisor: tens of µs per wake-up,
paid by each side of every request/answer round trip (docs/benchmarks.md, "Branch latency").
The Go runtime avoids most of them by spinning before it parks a thread. This is the event-loop
version: after a connection read, the loop keeps a callback scheduled for the window, so it
polls its sockets with a zero timeout instead of blocking, and an answer or the next request
that arrives within the window meets a running vCPU. Each round yields the CPU first
(``sched_yield``), so a spin only fills time no other runnable thread wants. Under load the loop
never blocks anyway and the spin is one callback per loop iteration; idle, it costs at most one
window of CPU per read. The client and the broker both spin (every RemotingConnection touches
its loop's spinner on each read).

``SPARKMQ_SPIN_US`` sets the window in µs (default 150; 0 turns it off), read once per loop,
like ``SPARKMQ_NATIVE`` a process-wide switch of the library rather than a command-line option.
"""

from __future__ import annotations

import asyncio
import os
import weakref

DEFAULT_WINDOW_US = 150
_yield = os.sched_yield

_spinners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Spinner | None] = weakref.WeakKeyDictionary()


def window_s() -> float:
    """The spin window from ``SPARKMQ_SPIN_US`` (µs; default 150), in seconds."""
    raw = os.environ.get("SPARKMQ_SPIN_US", "")
    return (int(raw) if raw.strip() else DEFAULT_WINDOW_US) / 1e6


class Spinner:
    """Keeps ``loop`` polling for ``window`` seconds after the last :meth:`touch`."""

    def __init__(self, loop: asyncio.AbstractEventLoop, window: float) -> None:
        self._loop = loop
        self._window = window
        self._touched = False
        self._running = False
        self._until = 0.0
        self.rounds = 0  # spin callbacks run, for tests and benches

    @property
    def running(self) -> bool:
        return self._running

    def touch(self) -> None:
        """I/O happened: spin for another window from now (cheap: one flag on the hot path)."""
        self._touched = True
        if not self._running:
            self._running = True
            self._loop.call_soon(self._spin)

    def _spin(self) -> None:
        self.rounds += 1
        now = self._loop.time()
        if self._touched:
            self._touched = False
            self._until = now + self._window
        if now < self._until:
            _yield()  # runnable threads of other processes go first: a spin only fills idle time
            self._loop.call_soon(self._spin)
        else:
            self._running = False


def spinner_for(loop: asyncio.AbstractEventLoop) -> Spinner | None:
    """The loop's one spinner (None when the window is 0)."""
    try:
        return _spinners[loop]
    except KeyError:
        window = window_s()
        spinner = Spinner(loop, window) if window > 0 else None
        _spinners[loop] = spinner
        return spinner
