"""SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE request frames from per-topic templates: the producer's hot path.

A producer sends the same header again and again: only the queue id, the opaque, the born
timestamp, the flags and the properties change. :class:`SendTemplate` renders the JSON header
text of a topic once per queue and fills in the rest with one f-string per send, instead of a
header object, a field dict and a JSON encoder call. The bytes are a frame ``RemotingCommand``
could have encoded (JSON header, language JAVA, version 4.9.7, ``extFields`` in
``SendMessageRequestHeaderV2``'s order); the tests decode both and compare.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from json.encoder import (
    encode_basestring,  # C-accelerated; non-ASCII kept, as RemotingCommand encodes
)

from sparkmq.errors import FrameTooLargeError
from sparkmq.message.names import AUTO_CREATE_TOPIC_KEY
from sparkmq.protocol import ONEWAY_FLAG, RequestCode
from sparkmq.protocol.codes import (
    DEFAULT_LANGUAGE,
    DEFAULT_VERSION,
    HEADER_LENGTH_FIELD_BYTES,
    LENGTH_PREFIX_BYTES,
    MAX_FRAME_BYTES,
)
from sparkmq.protocol.command import RemotingCommand
from sparkmq.protocol.wire_text import encodable
from sparkmq.remoting import client_native
from sparkmq.remoting.client import Signer

_PREFIX = struct.Struct(">II")  # frame length, serializeType (JSON = 0) << 24 | header length
_native_frame = client_native.frame
DEFAULT_TOPIC_QUEUE_NUMS = 4


@dataclass(frozen=True, slots=True)
class Outgoing:
    """What one send request carries besides its queue: ``properties`` is the decoded properties text."""

    code: int
    body: bytes
    properties: str
    unique_id: str
    sys_flag: int = 0
    flag: int = 0

    @property
    def batch(self) -> bool:
        return self.code == RequestCode.SEND_BATCH_MESSAGE


class SendTemplate:
    """The fixed text of one producer group's and topic's send headers, one middle part per queue id.

    >>> head = SendTemplate("PID", "T").head(Outgoing(310, b"hi", "WAIT\\x01true", "ID"), 3, 7, 1700000000000)
    >>> head[8:57]
    b'{"code":310,"flag":0,"language":"JAVA","opaque":7'
    """

    __slots__ = ("_fields", "_group", "_middles", "_topic", "middle_bytes", "middle_head")

    _START = f'{{"code":{RequestCode.SEND_MESSAGE_V2},"flag":0,"language":"{DEFAULT_LANGUAGE.name}","opaque":'
    #: a frame's text up to the opaque, then (``middle_of``) from the opaque to the sysFlag: the C lane's pieces
    START_BYTES = _START.encode()

    def __init__(self, group: str, topic: str) -> None:
        self._group, self._topic = group, topic
        self._fields = (
            f',"serializeTypeCurrentRPC":"JSON","version":{DEFAULT_VERSION},"extFields":{{'
            f'"a":{encode_basestring(encodable(group))},"b":{encode_basestring(topic)},'
            f'"c":"{AUTO_CREATE_TOPIC_KEY}","d":"{DEFAULT_TOPIC_QUEUE_NUMS}","e":"'
        )
        #: middle_of(queue id) is middle_head + the id's digits + ``","f":"``: the C lane writes those per send
        self.middle_head = self._fields.encode()
        self._middles: dict[int, str] = {}
        self.middle_bytes: dict[int, bytes] = {}  # queue id → middle_of(queue id), read per send

    def _middle(self, queue_id: int) -> str:
        middle = self._middles.get(queue_id)
        if middle is None:
            middle = self._middles[queue_id] = f'{self._fields}{int(queue_id)}","f":"'
        return middle

    def middle_of(self, queue_id: int) -> bytes:
        """The header's text from the opaque to the sysFlag's value for ``queue_id``, encoded (and kept)."""
        middle = self.middle_bytes.get(queue_id)
        if middle is None:
            middle = self.middle_bytes[queue_id] = self._middle(queue_id).encode()
        return middle

    def frame(
        self, queue_id: int, opaque: int, born_ms: int, properties: str, body: bytes, sys_flag: int, flag: int
    ) -> bytes:
        """A whole SEND_MESSAGE_V2 frame (a two-way single send): the same bytes as :meth:`head` + body.

        >>> out = Outgoing(310, b"hi", "WAIT\\x01true", "ID")
        >>> t = SendTemplate("PID", "T")
        >>> t.frame(3, 7, 1700000000000, out.properties, out.body, 0, 0) == t.head(out, 3, 7, 1700000000000) + b"hi"
        True
        """
        if _native_frame is not None:  # the same bytes from C (client_lane.c), in one allocation
            middle = self.middle_bytes.get(queue_id) or self.middle_of(queue_id)
            whole = _native_frame(self.START_BYTES, middle, opaque, sys_flag, born_ms, flag, properties, body)
            if whole is not None and len(whole) <= MAX_FRAME_BYTES:
                return whole
        return self.frame_python(queue_id, opaque, born_ms, properties, body, sys_flag, flag)

    def frame_python(
        self, queue_id: int, opaque: int, born_ms: int, properties: str, body: bytes, sys_flag: int, flag: int
    ) -> bytes:
        """:meth:`frame` in Python: the reference of the C one (and what raises for a frame too large)."""
        header = (
            f'{self._START}{opaque}{self._middles.get(queue_id) or self._middle(queue_id)}{sys_flag}",'
            f'"g":"{born_ms}","h":"{flag}","i":{encode_basestring(properties)},"j":"0","k":"false","m":"false"}}}}'
        ).encode()
        length = HEADER_LENGTH_FIELD_BYTES + len(header) + len(body)
        if length + LENGTH_PREFIX_BYTES > MAX_FRAME_BYTES:
            raise FrameTooLargeError(f"frame of {length + LENGTH_PREFIX_BYTES} bytes exceeds {MAX_FRAME_BYTES}")
        return _PREFIX.pack(length, len(header)) + header + body

    def head(self, out: Outgoing, queue_id: int, opaque: int, born_ms: int, oneway: bool = False) -> bytes:
        """The frame's length prefix and JSON header; the body follows it on the wire."""
        middle = self._middle(queue_id)
        text = (
            f'{{"code":{out.code},"flag":{ONEWAY_FLAG if oneway else 0},"language":"{DEFAULT_LANGUAGE.name}",'
            f'"opaque":{opaque}{middle}{out.sys_flag}","g":"{born_ms}","h":"{out.flag}",'
            f'"i":{encode_basestring(out.properties)},"j":"0","k":"false","m":"{"true" if out.batch else "false"}"}}}}'
        )
        header = text.encode("utf-8")
        length = HEADER_LENGTH_FIELD_BYTES + len(header) + len(out.body)
        if length + LENGTH_PREFIX_BYTES > MAX_FRAME_BYTES:
            raise FrameTooLargeError(f"frame of {length + LENGTH_PREFIX_BYTES} bytes exceeds {MAX_FRAME_BYTES}")
        return _PREFIX.pack(length, len(header)) + header

    def signed_head(
        self, out: Outgoing, queue_id: int, opaque: int, born_ms: int, oneway: bool, signer: Signer
    ) -> bytes:
        """:meth:`head` for a client that signs (ACL): the same fields, signed, through ``RemotingCommand``."""
        fields = {
            "a": self._group,
            "b": self._topic,
            "c": AUTO_CREATE_TOPIC_KEY,
            "d": str(DEFAULT_TOPIC_QUEUE_NUMS),
            "e": str(queue_id),
            "f": str(out.sys_flag),
            "g": str(born_ms),
            "h": str(out.flag),
            "i": out.properties,
            "j": "0",
            "k": "false",
            "m": "true" if out.batch else "false",
        }
        command = RemotingCommand.request(
            out.code, opaque, ext_fields=signer(fields, out.body), body=out.body, oneway=oneway
        )
        return command.encode_parts()[0]
