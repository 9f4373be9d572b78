"""RocketMQ 4.x remoting protocol, sans-I/O: codes, commands, frame decoder, headers, bodies.

Pure standard library (plus :mod:`sparkmq.errors`): no sockets, no asyncio. The remoting layer
feeds bytes to a :class:`FrameDecoder`, gets :class:`RemotingCommand` objects back, parses
their extFields with the typed headers (``headers``, ``admin_headers``) and their bodies with
``bodies`` / ``admin_bodies``, and writes ``command.encode()``.

Example::

    >>> from sparkmq.protocol import FrameDecoder, RemotingCommand, RequestCode
    >>> frame = RemotingCommand.request(RequestCode.HEART_BEAT, opaque=1, body=b"{}").encode()
    >>> [cmd.code for cmd in FrameDecoder().feed(frame)]
    [34]
"""

from __future__ import annotations

from .codes import (
    DEFAULT_LANGUAGE,
    DEFAULT_VERSION,
    MAX_FRAME_BYTES,
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    LanguageCode,
    MQVersion,
    PermName,
    PullSysFlag,
    RequestCode,
    ResponseCode,
    SerializeType,
    code_name,
)
from .command import RemotingCommand
from .frame import FrameDecoder, decode_frame
from .schema import CommandHeader, Int32, Int64, wire_key

__all__ = [
    "DEFAULT_LANGUAGE",
    "DEFAULT_VERSION",
    "MAX_FRAME_BYTES",
    "ONEWAY_FLAG",
    "RESPONSE_FLAG",
    "CommandHeader",
    "FrameDecoder",
    "Int32",
    "Int64",
    "LanguageCode",
    "MQVersion",
    "PermName",
    "PullSysFlag",
    "RemotingCommand",
    "RequestCode",
    "ResponseCode",
    "SerializeType",
    "code_name",
    "decode_frame",
    "wire_key",
]
