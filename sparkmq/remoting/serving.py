"""How a :class:`~sparkmq.remoting.connection.RemotingConnection` answers the requests it decoded.

``_serve_all`` gives one read's requests to the handler (a server's group dispatch answers a run
of them together), and ``_deliver`` turns each answer into a response: one given at once is
written now; a coroutine is stepped in the read callback up to its first suspension (``_step``),
and only one that suspends costs a Task; an asyncio future gets a callback (``_answered``). While
the peer does not read our responses, requests wait (``_serve_when_writable``, ``_serve``) instead
of building more. A request whose serving raises is answered with :func:`error_response`.

The functions taking ``self`` are ``RemotingConnection``'s methods, bound by name in its class
body (as those of :mod:`sparkmq.remoting.read_paths`): no call, frame or lookup more per request.
"""

from __future__ import annotations

import asyncio
import logging
import types
from collections.abc import Awaitable, Coroutine, Generator
from typing import TYPE_CHECKING, Any, cast

from sparkmq.errors import SparkmqError
from sparkmq.protocol import RemotingCommand, ResponseCode

if TYPE_CHECKING:
    from sparkmq.remoting.connection import Answer, RemotingConnection

# The connection's logger: these records are the connection's, under the name they always had.
logger = logging.getLogger("sparkmq.remoting.connection")


def _serve_all(self: RemotingConnection, requests: list[RemotingCommand]) -> None:
    """Serve the requests of one read: answered at once where the handler can, else later.

    While the peer does not read our responses, nothing is served until it does (reading
    is paused then too, so at most one read's requests wait here).
    """
    if not requests:
        return
    if self.writes_paused:
        task = self._loop.create_task(self._serve_when_writable(requests))
        self._unstarted += 1
        task.add_done_callback(self._task_done)
        self._tasks.add(task)
        return
    self._receiving = True
    try:
        if self._group_handler is not None and not self._unstarted:
            answers = self._group_handler(requests, self)
        else:
            assert self._handler is not None
            answers = [self._handler(request, self) for request in requests]
        for request, answer in zip(requests, answers, strict=True):
            self._deliver(request, answer)
    finally:
        self._receiving = False
        if self._out:
            self._flush_out()


async def _serve_when_writable(self: RemotingConnection, requests: list[RemotingCommand]) -> None:
    self._unstarted -= 1
    await self._writable.wait()
    self._serve_all(requests)


def _deliver(self: RemotingConnection, request: RemotingCommand, answer: Answer) -> None:
    if answer is None:
        return
    if isinstance(answer, RemotingCommand):
        if not request.is_oneway:
            self.send(answer)
        return
    if isinstance(answer, asyncio.Future):
        future: asyncio.Future[Any] = answer
        future.add_done_callback(lambda done: self._answered(request, done))
    elif type(answer) is _COROUTINE and not self._unstarted and self._writable.is_set():
        self._step(request, cast(Coroutine[Any, Any, RemotingCommand | None], answer))
        return
    else:
        future = self._loop.create_task(self._serve(request, answer))
        self._unstarted += 1
        future.add_done_callback(self._task_done)
    self._tasks.add(future)


def _step(
    self: RemotingConnection, request: RemotingCommand, answer: Coroutine[Any, Any, RemotingCommand | None]
) -> None:
    """Run a request's coroutine up to its first suspension now, in the read callback; one that
    answers without suspending (most queries) costs no Task, no loop turn and no extra write.
    One that suspends goes on in a Task from where it stopped. (Until it suspends, it runs
    outside any Task: ``asyncio.current_task()`` is None there, so ``asyncio.timeout`` would fail.)
    """
    try:
        yielded = answer.send(None)
    except StopIteration as done:
        response = done.value
    except asyncio.CancelledError:
        return  # as a Task cancelled before it answered: no answer
    except Exception as exc:  # noqa: BLE001 - every failure becomes the request's answer
        response = error_response(request, exc, self.peer)
    else:
        future = self._loop.create_task(self._finish(request, _resumed(answer, yielded)))
        future.add_done_callback(self._task_done)
        self._tasks.add(future)  # started already: later requests need not wait for it (_unstarted)
        return
    if response is not None and not request.is_oneway:
        self.send(response)


def _answered(
    self: RemotingConnection, request: RemotingCommand, future: asyncio.Future[RemotingCommand | None]
) -> None:
    self._task_done(future)
    if future.cancelled():
        return
    exc = future.exception()
    response = future.result() if exc is None else error_response(request, exc, self.peer)
    if response is not None and not request.is_oneway:
        self.send(response)


async def _serve(self: RemotingConnection, request: RemotingCommand, answer: Awaitable[RemotingCommand | None]) -> None:
    self._unstarted -= 1
    if not self._writable.is_set():
        await self._writable.wait()  # build no response while the peer is not reading the last ones
    await self._finish(request, answer)


async def _finish(
    self: RemotingConnection, request: RemotingCommand, answer: Awaitable[RemotingCommand | None]
) -> None:
    try:
        response = await answer
    except Exception as exc:  # noqa: BLE001 - every failure becomes the request's answer
        response = error_response(request, exc, self.peer)
    if response is not None and not request.is_oneway:
        self.send(response)


_COROUTINE = types.CoroutineType


@types.coroutine
def _resumed(coro: Coroutine[Any, Any, Any], yielded: Any) -> Generator[Any, Any, Any]:
    """The rest of ``coro``, which already ran to its first suspension and yielded ``yielded``
    (what ``yield from`` does, started one step in): a Task drives it as it would ``coro``."""
    while True:
        try:
            sent = yield yielded
        except GeneratorExit:
            coro.close()
            raise
        except BaseException as exc:  # noqa: BLE001 - a cancellation (or any throw) goes into coro
            try:
                yielded = coro.throw(exc)
            except StopIteration as done:
                return done.value
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration as done:
                return done.value


def error_response(request: RemotingCommand, exc: BaseException, peer: tuple[str, int]) -> RemotingCommand:
    """The answer to a request whose serving raised: the error's code and remark, or SYSTEM_ERROR
    (logged with its traceback) for anything that is not a :class:`SparkmqError`."""
    if isinstance(exc, SparkmqError):
        return request.make_response(exc.code, remark=exc.remark)
    logger.error("request code %d from %s:%d failed", request.code, *peer, exc_info=exc)
    return request.make_response(ResponseCode.SYSTEM_ERROR, remark=f"{type(exc).__name__}: {exc}")
