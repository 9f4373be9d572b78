"""A request's coroutine runs to its first suspension in the read callback (no Task when it
answers at once); one that suspends goes on in a Task from where it stopped, in arrival order."""

from __future__ import annotations

import asyncio

from sparkmq.errors import TopicNotExistError
from sparkmq.protocol import FrameDecoder, RemotingCommand, RequestCode, ResponseCode
from sparkmq.remoting import RemotingConnection, RemotingServer


class Processors:
    """Processors that record where they ran; ``release`` lets the parked ones go on."""

    def __init__(self) -> None:
        self.release: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        self.tasks: dict[str, asyncio.Task[object] | None] = {}
        self.order: list[str] = []

    async def quick(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        name = request.ext_fields["x"]
        self.order.append(name)
        self.tasks[name] = asyncio.current_task()
        return request.make_response(ext_fields={"echo": name})

    async def parked(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        self.order.append("parked")
        try:
            got = await self.release  # a failure thrown into the Task reaches this coroutine
        except ValueError as exc:
            got = f"thrown {exc}"
        await asyncio.sleep(0)  # a bare yield too
        self.tasks["parked after"] = asyncio.current_task()
        return request.make_response(ext_fields={"echo": got})

    async def failing_later(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        await asyncio.sleep(0)
        raise TopicNotExistError("topic[late] not exist")

    async def failing_now(self, request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand:
        raise TopicNotExistError("topic[now] not exist")


async def exchange(release: object) -> tuple[list[RemotingCommand], Processors]:
    processors = Processors()
    server = RemotingServer("127.0.0.1", 0)
    server.register(RequestCode.HEART_BEAT, processors.quick)
    server.register(RequestCode.PULL_MESSAGE, processors.parked)
    server.register(RequestCode.SEND_MESSAGE, processors.failing_now)
    server.register(RequestCode.GET_MAX_OFFSET, processors.failing_later)
    port = await server.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        requests = [
            RemotingCommand.request(RequestCode.PULL_MESSAGE, 1),
            RemotingCommand.request(RequestCode.HEART_BEAT, 2, ext_fields={"x": "a"}),
            RemotingCommand.request(RequestCode.SEND_MESSAGE, 3),
            RemotingCommand.request(RequestCode.GET_MAX_OFFSET, 4),
            RemotingCommand.request(RequestCode.HEART_BEAT, 5, ext_fields={"x": "b"}),
        ]
        writer.write(b"".join(request.encode() for request in requests))  # one read, most likely; any split works too
        await writer.drain()
        decoder, answers = FrameDecoder(), []
        while len(answers) < 4:  # all but the parked one, which waits for ``release``
            answers += decoder.feed(await reader.read(65536))
        assert processors.order == ["parked", "a", "b"]
        if isinstance(release, BaseException):
            processors.release.set_exception(release)
        else:
            processors.release.set_result(str(release))
        while len(answers) < 5:
            answers += decoder.feed(await reader.read(65536))
        return answers, processors
    finally:
        writer.close()
        await writer.wait_closed()
        await server.close()


def test_answers_at_once_and_the_parked_request_goes_on_from_where_it_stopped() -> None:
    answers, processors = asyncio.run(exchange("released"))
    by_opaque = {answer.opaque: answer for answer in answers}
    assert {answer.opaque for answer in answers[:4]} == {2, 3, 4, 5} and answers[4].opaque == 1
    assert by_opaque[2].ext_fields == {"echo": "a"} and by_opaque[5].ext_fields == {"echo": "b"}
    assert (by_opaque[3].code, by_opaque[3].remark) == (ResponseCode.TOPIC_NOT_EXIST, "topic[now] not exist")
    assert (by_opaque[4].code, by_opaque[4].remark) == (ResponseCode.TOPIC_NOT_EXIST, "topic[late] not exist")
    assert by_opaque[1].ext_fields == {"echo": "released"}  # the value the awaited future got
    # answered without suspending: no Task; the parked one's rest ran in one
    assert processors.tasks["a"] is None and processors.tasks["b"] is None
    assert processors.tasks["parked after"] is not None


def test_a_failure_thrown_into_the_parked_request_reaches_its_coroutine() -> None:
    answers, _processors = asyncio.run(exchange(ValueError("boom")))
    parked = next(answer for answer in answers if answer.opaque == 1)
    assert (parked.code, parked.ext_fields) == (ResponseCode.SUCCESS, {"echo": "thrown boom"})
