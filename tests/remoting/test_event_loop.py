"""``cli.service.loop_factory``: the services' event loop (uvloop when importable)."""

from __future__ import annotations

import asyncio
import sys

import pytest
import uvloop

from sparkmq.cli.service import loop_factory


def test_auto_and_uvloop_choose_uvloop_and_asyncio_chooses_asyncio() -> None:
    assert loop_factory("auto") is uvloop.new_event_loop
    assert loop_factory("UVLOOP") is uvloop.new_event_loop
    assert loop_factory("asyncio") is asyncio.new_event_loop


def test_the_environment_chooses_when_the_caller_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKMQ_EVENT_LOOP", "asyncio")
    assert loop_factory() is asyncio.new_event_loop
    monkeypatch.delenv("SPARKMQ_EVENT_LOOP")
    assert loop_factory() is uvloop.new_event_loop


def test_without_uvloop_auto_falls_back_and_uvloop_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "uvloop", None)  # import uvloop now raises ImportError
    assert loop_factory("auto") is asyncio.new_event_loop
    with pytest.raises(ImportError):
        loop_factory("uvloop")


def test_an_unknown_choice_is_refused() -> None:
    with pytest.raises(ValueError, match="SPARKMQ_EVENT_LOOP must be auto, uvloop or asyncio"):
        loop_factory("trio")
