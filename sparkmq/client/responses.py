"""Responses into the exception tree: one place turns a non-SUCCESS answer into the named error.

Standard library and the protocol only (no asyncio): Spark's driver-side runner checks its
blocking answers with the same function as the asyncio client.
"""

from __future__ import annotations

from sparkmq.errors import RemoteError, TopicNotExistError
from sparkmq.protocol import RemotingCommand, ResponseCode, code_name


def check_response(response: RemotingCommand, what: str) -> RemotingCommand:
    """Return a SUCCESS response; raise the error tree's exception for any other code."""
    if response.code == ResponseCode.SUCCESS:
        return response
    remark = f"{what}: {response.remark or code_name(response.code, response=True)}"
    if response.code == ResponseCode.TOPIC_NOT_EXIST:
        raise TopicNotExistError(remark)
    raise RemoteError(
        remark, code=response.code, retriable=response.code in (ResponseCode.SYSTEM_BUSY, ResponseCode.SYSTEM_ERROR)
    )
