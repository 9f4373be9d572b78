"""GET_CONSUMER_RUNNING_INFO passed on to the member named: its own answer comes back whatever it
is, and a member that never answers still gets the admin a precise SYSTEM_ERROR in time."""

from __future__ import annotations

import asyncio

from sparkmq.broker.processors.admin_ops import CALL_CONSUMER_TIMEOUT_S
from sparkmq.client.admin_ext import ADMIN_TIMEOUT_S
from sparkmq.protocol import RemotingCommand, RequestCode, ResponseCode
from sparkmq.protocol.headers import GetConsumerRunningInfoRequestHeader
from sparkmq.remoting import RemotingConnection
from support.broker_wire import Wire, run_broker


async def _old_client(request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand | None:
    return request.make_response(ResponseCode.REQUEST_CODE_NOT_SUPPORTED, remark="old client")


async def _hung_client(request: RemotingCommand, connection: RemotingConnection) -> RemotingCommand | None:
    await asyncio.Event().wait()  # never answers
    return None


def test_members_answer_or_hang_and_the_admin_always_hears_why(tmp_path) -> None:
    assert CALL_CONSUMER_TIMEOUT_S < ADMIN_TIMEOUT_S

    async def scenario(admin: Wire) -> None:
        old, hung = Wire(admin.broker, _old_client), Wire(admin.broker, _hung_client)
        try:
            assert (await old.heartbeat("10.0.0.1@old", "CID_info", {"T": "*"})).code == ResponseCode.SUCCESS
            assert (await hung.heartbeat("10.0.0.2@hung", "CID_info", {"T": "*"})).code == ResponseCode.SUCCESS

            def ask(client_id: str) -> dict[str, str]:
                return GetConsumerRunningInfoRequestHeader("CID_info", client_id).to_fields()

            answered = await admin.call(RequestCode.GET_CONSUMER_RUNNING_INFO, ask("10.0.0.1@old"))
            assert (answered.code, answered.remark) == (ResponseCode.REQUEST_CODE_NOT_SUPPORTED, "old client")

            waiting = asyncio.ensure_future(
                admin.call(RequestCode.GET_CONSUMER_RUNNING_INFO, ask("10.0.0.2@hung"), timeout=ADMIN_TIMEOUT_S)
            )
            # while the hung member is being waited for, the broker answers the others
            again = await admin.call(RequestCode.GET_CONSUMER_RUNNING_INFO, ask("10.0.0.1@old"))
            assert again.code == ResponseCode.REQUEST_CODE_NOT_SUPPORTED and not waiting.done()
            silent = await waiting
            assert silent.code == ResponseCode.SYSTEM_ERROR
            assert silent.remark.startswith("invoke consumer <CID_info> <10.0.0.2@hung> Exception:")
            assert "timed out" in silent.remark
        finally:
            await old.close()
            await hung.close()

    run_broker(tmp_path / "store", scenario)
