"""Bounded waits keep a caller's cancellation and never leave a lock held by nobody."""

from __future__ import annotations

import asyncio

import pytest

from sparkmq.remoting.waits import acquire_within, done_within


def test_a_cancel_that_races_the_result_still_cancels_the_caller() -> None:
    async def scenario() -> None:
        future = asyncio.get_running_loop().create_future()
        waiter = asyncio.ensure_future(done_within(future, 10.0))
        await asyncio.sleep(0)  # the waiter is parked on the future
        future.set_result(1)
        waiter.cancel()  # in the same loop turn: asyncio.wait_for on 3.11 returned the result here
        with pytest.raises(asyncio.CancelledError):
            await waiter
        assert future.result() == 1  # and what it waited on was left alone

    asyncio.run(scenario())


def test_a_timed_out_acquire_never_leaves_the_lock_held_by_nobody() -> None:
    async def scenario() -> None:
        lock = asyncio.Lock()
        outcomes = set()
        for i in range(300):
            await lock.acquire()
            # the holder lets go around the moment the waiter gives up: both orders happen
            asyncio.get_running_loop().call_later(0.0005 * (i % 3), lock.release)
            held = await acquire_within(lock, 0.0005)
            outcomes.add(held)
            if held:
                lock.release()
            else:
                await asyncio.sleep(0.002)  # the holder's release has run by now
            assert not lock.locked(), f"round {i}: the lock is held by nobody"
        assert outcomes == {True, False}

    asyncio.run(scenario())


def test_cancelling_a_caller_waiting_for_a_lock_cancels_it_and_leaves_the_lock() -> None:
    async def scenario() -> None:
        lock = asyncio.Lock()
        await lock.acquire()
        caller = asyncio.ensure_future(acquire_within(lock, 10.0))
        await asyncio.sleep(0.01)
        caller.cancel()
        with pytest.raises(asyncio.CancelledError):
            await caller
        lock.release()
        await asyncio.sleep(0)
        assert not lock.locked()

    asyncio.run(scenario())
