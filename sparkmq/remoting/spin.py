"""A bounded spin: keep an event loop polling, not sleeping, for a short window after it read.

On a VM an idle vCPU halts, and waking it goes through the hypervisor: tens of µs per wake-up,
paid by each side of every request/answer round trip (docs/design-notes.md, "Idle vCPUs and the spin").
The Go runtime avoids most of them by spinning before it parks a thread. This is the event-loop
version: after a connection read, the loop keeps a callback scheduled for the window, so it
polls its sockets with a zero timeout instead of blocking, and an answer or the next request
that arrives within the window meets a running vCPU. Each idle round yields the CPU first
(``sched_yield``), so a spin only fills time no other runnable thread wants; a round after I/O
does not (the loop is busy, not spinning: a yield there was a system call per read). Under load
the loop never blocks anyway and the spin is one callback per loop iteration; idle, it costs at
most one window of CPU per read. The broker spins (every server connection touches its loop's spinner on
each read); a client spins only when ``SPARKMQ_SPIN_US`` is set: a client runs on hosts it shares
with other work, where a spin's CPU is somebody else's, so it pays that CPU only by choice
(docs/clients.md, "The spin after each read").

The spin adapts to the traffic: a window that ends with no read in it caught nothing, and after
``DORMANT_AFTER_MISSES`` such windows in a row the spinner goes dormant (paced traffic, a consumer
waiting on a long poll: reads farther apart than a window, where a spin only burns CPU). Dormant,
a read starts a spin again only when it came within one window of the previous read: the
request/answer ping-pong the spin is for.

``SPARKMQ_SPIN_US`` sets the window in µs (unset: 150 for the broker, none for clients; 0 turns it
off for both), read once per loop, like ``SPARKMQ_NATIVE`` a process-wide switch of the library
rather than a command-line option.
"""

from __future__ import annotations

import asyncio
import math
import os
import time
import weakref
from collections.abc import Callable

DEFAULT_WINDOW_US = 150
DORMANT_AFTER_MISSES = 8  # windows in a row with no read in them
_yield = os.sched_yield

_spinners: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Spinner | None] = weakref.WeakKeyDictionary()


def window_s() -> float:
    """The spin window from ``SPARKMQ_SPIN_US`` (µs; default 150), in seconds."""
    raw = os.environ.get("SPARKMQ_SPIN_US", "")
    return (int(raw) if raw.strip() else DEFAULT_WINDOW_US) / 1e6


def client_spins() -> bool:
    """Whether a client's reads spin: only when ``SPARKMQ_SPIN_US`` is set (to a window above 0)."""
    return bool(os.environ.get("SPARKMQ_SPIN_US", "").strip()) and window_s() > 0


class Spinner:
    """Keeps ``loop`` polling for ``window`` seconds after the last :meth:`touch` (see the module)."""

    def __init__(
        self, loop: asyncio.AbstractEventLoop, window: float, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._loop = loop
        self._window = window
        # Not loop.time(): uvloop's counts whole milliseconds, which made a 150 µs window last
        # until the next millisecond tick (up to 1 ms of spinning per read).
        self._clock = clock
        self._touched = False
        self._running = False
        self._until = 0.0
        self._caught = False  # a read came while this chain of rounds was spinning
        self.misses = 0  # windows in a row that ended with no read in them
        self._last_read = 0.0  # dormant: when the last read came
        self.rounds = 0  # spin callbacks run, for tests and benches

    @property
    def running(self) -> bool:
        return self._running

    @property
    def dormant(self) -> bool:
        return self.misses >= DORMANT_AFTER_MISSES

    def touch(self) -> None:
        """I/O happened: spin for another window from now (cheap: one flag on the hot path)."""
        self._touched = True
        if not self._running:
            if self.misses >= DORMANT_AFTER_MISSES:
                now = self._clock()
                gap, self._last_read = now - self._last_read, now
                if gap >= self._window:
                    return  # reads still farther apart than a window: a spin would catch nothing
                self.misses = 0
            self._running = True
            self._caught = False
            self._until = -math.inf  # the chain's first round opens its window: not a catch
            self._loop.call_soon(self._spin)

    def _spin(self) -> None:
        self.rounds += 1
        now = self._clock()
        if self._touched:  # I/O since the last round: the loop is busy, and this round is no idle spin
            if now <= self._until:
                self._caught = True
            self._touched = False
            self._until = now + self._window
            self._loop.call_soon(self._spin)
            return
        if now < self._until:
            _yield()  # runnable threads of other processes go first: a spin only fills idle time
            self._loop.call_soon(self._spin)
            return
        self._running = False
        if self._caught:
            self.misses = 0
        else:
            self.misses += 1
            self._last_read = self._until - self._window


def spinner_for(loop: asyncio.AbstractEventLoop) -> Spinner | None:
    """The loop's one spinner (None when the window is 0)."""
    try:
        return _spinners[loop]
    except KeyError:
        window = window_s()
        spinner = Spinner(loop, window) if window > 0 else None
        _spinners[loop] = spinner
        return spinner


def client_spinner_for(loop: asyncio.AbstractEventLoop) -> Spinner | None:
    """The loop's spinner for a client connection's reads (None unless :func:`client_spins`)."""
    return spinner_for(loop) if client_spins() else None
