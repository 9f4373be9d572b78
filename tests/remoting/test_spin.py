"""The bounded spin after a read: it runs, it stops by itself, a window of 0 turns it off, and a client spins only
when asked to."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager

import pytest

from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.remoting import RemotingClient, RemotingConnection, RemotingServer, spin
from sparkmq.remoting.spin import Spinner, spinner_for

SETTLE_ROUNDS = 1_000_000  # loop iterations a spin of 1 ms may take at most, on any machine


async def until_stopped(spinner: Spinner) -> int:
    """Let the loop run until the spinner stopped; the loop iterations that took."""
    for iterations in range(SETTLE_ROUNDS):
        if not spinner.running:
            return iterations
        await asyncio.sleep(0)
    raise AssertionError("the spinner never stopped")


def test_a_touch_spins_the_loop_and_the_spin_ends_by_itself() -> None:
    async def scenario() -> None:
        spinner = Spinner(asyncio.get_running_loop(), 0.001)
        assert not spinner.running
        spinner.touch()
        assert spinner.running
        await until_stopped(spinner)
        first = spinner.rounds
        assert first >= 1
        spinner.touch()  # a later read starts a new window
        await until_stopped(spinner)
        assert spinner.rounds > first

    asyncio.run(scenario())


def test_touches_during_a_spin_keep_one_callback_chain() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        spinner = Spinner(loop, 0.001)
        for _ in range(100):
            spinner.touch()
        # one chain: each loop iteration runs the spin callback once, so the rounds never outrun
        # the iterations the loop made
        iterations = await until_stopped(spinner)
        assert 1 <= spinner.rounds <= iterations + 1

    asyncio.run(scenario())


def test_a_zero_window_turns_the_spin_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKMQ_SPIN_US", "0")

    async def scenario() -> None:
        assert spinner_for(asyncio.get_running_loop()) is None

    asyncio.run(scenario())
    monkeypatch.setenv("SPARKMQ_SPIN_US", "")
    assert spin.window_s() == spin.DEFAULT_WINDOW_US / 1e6


def test_one_spinner_per_loop() -> None:
    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        assert spinner_for(loop) is spinner_for(loop)

    asyncio.run(scenario())


@contextmanager
def server_in_its_own_thread() -> Iterator[int]:
    """A heartbeat-answering RemotingServer on a loop of another thread (its spins stay off this loop): its port."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = RemotingServer("127.0.0.1", 0)

    async def heartbeat(request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        return request.make_response()

    server.register(RequestCode.HEART_BEAT, heartbeat)
    try:
        yield asyncio.run_coroutine_threadsafe(server.start(), loop).result(30)
    finally:
        asyncio.run_coroutine_threadsafe(server.close(), loop).result(30)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()


def client_spin_rounds(port: int) -> int:
    """The spin rounds of a client's own loop while it sends three heartbeats and the spin settles."""

    async def scenario() -> int:
        loop = asyncio.get_running_loop()
        client = RemotingClient()
        try:
            for _ in range(3):
                answer = await client.invoke(f"127.0.0.1:{port}", RequestCode.HEART_BEAT)
                assert answer.code == ResponseCode.SUCCESS
        finally:
            await client.close()
        spinner = spinner_for(loop)
        assert spinner is not None
        await until_stopped(spinner)
        return spinner.rounds

    return asyncio.run(scenario())


def test_a_client_spins_only_when_the_window_is_set(monkeypatch: pytest.MonkeyPatch) -> None:
    """Unset, a client's reads leave its loop idle; ``SPARKMQ_SPIN_US=150`` makes them spin it, as the broker's do."""
    with server_in_its_own_thread() as port:
        monkeypatch.delenv("SPARKMQ_SPIN_US", raising=False)
        assert client_spin_rounds(port) == 0
        monkeypatch.setenv("SPARKMQ_SPIN_US", "150")
        assert client_spin_rounds(port) > 0


def test_server_reads_spin_their_loop(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the window unset, a request read by the server starts its loop's spin (the client's read does not)."""
    monkeypatch.delenv("SPARKMQ_SPIN_US", raising=False)

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        spinner = spinner_for(loop)
        assert spinner is not None  # the default window
        server = RemotingServer("127.0.0.1", 0)

        async def heartbeat(request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
            return request.make_response()

        server.register(RequestCode.HEART_BEAT, heartbeat)
        port = await server.start()
        client = RemotingClient()
        try:
            for _ in range(3):
                await until_stopped(spinner)
                before = spinner.rounds
                answer = await client.invoke(f"127.0.0.1:{port}", RequestCode.HEART_BEAT)
                assert answer.code == ResponseCode.SUCCESS
                assert spinner.running or spinner.rounds > before  # the server's read touched it
        finally:
            await client.close()
            await server.close()
        await until_stopped(spinner)

    asyncio.run(scenario())


class ManualClockLoop(asyncio.SelectorEventLoop):
    """An event loop whose ``time()`` the test sets (the spinners' clock here): windows end when the test says."""

    now = 0.0

    def time(self) -> float:
        return self.now


def run_on_manual_clock(test: Callable[[ManualClockLoop], Awaitable[None]]) -> None:
    loop = ManualClockLoop()
    try:
        loop.run_until_complete(test(loop))
    finally:
        loop.close()


async def window_passes(loop: ManualClockLoop, spinner: Spinner, seconds: float) -> None:
    """Let the clock move on by ``seconds`` and the spin's rounds see it (it stops if that ends its window)."""
    await asyncio.sleep(0)
    loop.now += seconds
    for _ in range(10):
        await asyncio.sleep(0)


def test_windows_that_catch_no_read_make_the_spinner_dormant_until_reads_come_close_again() -> None:
    async def scenario(loop: ManualClockLoop) -> None:
        spinner = Spinner(loop, 1.0, clock=loop.time)
        for missed in range(1, spin.DORMANT_AFTER_MISSES + 1):
            spinner.touch()  # a read, then nothing for longer than the window (paced traffic)
            await window_passes(loop, spinner, 2.0)
            assert not spinner.running and spinner.misses == missed
        assert spinner.dormant
        await window_passes(loop, spinner, 5.0)
        spinner.touch()  # reads still far apart: no spin
        assert not spinner.running
        await window_passes(loop, spinner, 0.5)
        spinner.touch()  # within one window of the previous read: ping-pong again, spin
        assert spinner.running and not spinner.dormant
        await window_passes(loop, spinner, 0.5)
        spinner.touch()  # caught by the running spin
        await window_passes(loop, spinner, 2.0)
        assert not spinner.running and spinner.misses == 0

    run_on_manual_clock(scenario)


def test_a_window_that_catches_a_read_resets_the_misses() -> None:
    async def scenario(loop: ManualClockLoop) -> None:
        spinner = Spinner(loop, 1.0, clock=loop.time)
        for _ in range(spin.DORMANT_AFTER_MISSES - 1):
            spinner.touch()
            await window_passes(loop, spinner, 2.0)
        assert spinner.misses == spin.DORMANT_AFTER_MISSES - 1 and not spinner.dormant
        spinner.touch()
        await window_passes(loop, spinner, 0.9)
        spinner.touch()  # the answer came inside the window: the spin paid off
        await window_passes(loop, spinner, 2.0)
        assert not spinner.running and spinner.misses == 0

    run_on_manual_clock(scenario)
