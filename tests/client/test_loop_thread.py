"""``loop_thread.Handoff``: the outcome the client loop hands to one blocked thread (the blocking ``Producer.send``)."""

from __future__ import annotations

import threading

import pytest

from sparkmq.client import loop_thread
from sparkmq.errors import TopicNotExistError


def test_the_loop_threads_result_reaches_the_waiting_thread() -> None:
    outcome: loop_thread.Handoff[str] = loop_thread.Handoff()
    assert outcome.set_running_or_notify_cancel() and not outcome.done()
    loop_thread.background_loop().call_soon_threadsafe(outcome.set_result, "stored")
    assert outcome.result(30) == "stored"
    assert outcome.done() and outcome.result(0) == "stored"  # asked again: the same, at once


def test_an_exception_set_by_the_loop_is_raised_in_the_waiting_thread() -> None:
    outcome: loop_thread.Handoff[str] = loop_thread.Handoff()
    error = TopicNotExistError("no route for topic Nowhere")
    loop_thread.background_loop().call_soon_threadsafe(outcome.set_exception, error)
    with pytest.raises(TopicNotExistError) as raised:
        outcome.result(30)
    assert raised.value is error
    with pytest.raises(TopicNotExistError):
        outcome.result(0)


def test_no_outcome_in_time_raises_timeout_error_and_a_late_one_is_still_kept() -> None:
    outcome: loop_thread.Handoff[int] = loop_thread.Handoff()
    with pytest.raises(TimeoutError, match="no outcome within 0.05 s"):
        outcome.result(0.05)
    assert not outcome.done()
    late = threading.Thread(target=outcome.set_result, args=(7,))
    late.start()
    late.join()
    assert outcome.done() and outcome.result(None) == 7
