"""SEND_MESSAGE_V2 / SEND_BATCH_MESSAGE request frames from per-topic templates: the producer's hot path.

A producer sends the same header again and again: only the queue id, the opaque, the born
timestamp, the flags and the properties change. :class:`SendTemplate` renders the JSON header
text of a topic once per queue and fills in the rest with one f-string per send, instead of a
header object, a field dict and a JSON encoder call. The bytes are a frame ``RemotingCommand``
could have encoded (JSON header, language JAVA, version 4.9.7, ``extFields`` in
``SendMessageRequestHeaderV2``'s order); the tests decode both and compare.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from json.encoder import (
    encode_basestring,  # C-accelerated; non-ASCII kept, as RemotingCommand encodes
)

from sparkmq.client.message import WAIT_FALSE_PREFIX, WAIT_TRUE_PREFIX
from sparkmq.errors import FrameTooLargeError
from sparkmq.message.names import AUTO_CREATE_TOPIC_KEY
from sparkmq.native import extension
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
from sparkmq.remoting.client import Signer

# native/clientframes.c: the frame in one call (~0.2 µs instead of ~1), None over MAX_FRAME_BYTES; the f-string below is
# its reference
_native = extension("sparkmq.native._clientframes")
_PREFIX = struct.Struct(">II")  # frame length, serializeType (JSON = 0) << 24 | header length
_BATCH = RequestCode.SEND_BATCH_MESSAGE
_LANGUAGE = DEFAULT_LANGUAGE.name
DEFAULT_TOPIC_QUEUE_NUMS = 4
#: WAIT (by wait_store_ok) then UNIQ_KEY as a JSON string up to the id: a plain message's properties, escaped once
PLAIN_JSON = {
    wait: encode_basestring(prefix)[:-1] for wait, prefix in ((True, WAIT_TRUE_PREFIX), (False, WAIT_FALSE_PREFIX))
}


class SendTemplate:
    """The fixed text of one producer group's and topic's send headers, one middle part per queue id.

    >>> frame = SendTemplate("PID", "T").frame(310, 3, 7, 1700000000000, '"WAIT"', b"hi", 0, 0)
    >>> frame[8:57]
    b'{"code":310,"flag":0,"language":"JAVA","opaque":7'
    """

    __slots__ = ("_fields", "_fields_bytes", "_group", "_middles", "_topic")

    def __init__(self, group: str, topic: str) -> None:
        self._group, self._topic = group, topic
        self._fields = (
            f',"serializeTypeCurrentRPC":"JSON","version":{DEFAULT_VERSION},"extFields":{{'
            f'"a":{encode_basestring(encodable(group))},"b":{encode_basestring(topic)},'
            f'"c":"{AUTO_CREATE_TOPIC_KEY}","d":"{DEFAULT_TOPIC_QUEUE_NUMS}","e":"'
        )
        self._fields_bytes = self._fields.encode()
        self._middles: dict[int, str] = {}  # queue id → the header's text from the opaque to the sysFlag

    def native_render(self) -> tuple[Callable[..., bytes | None] | None, bytes]:
        """The C render of this template's unsigned frames (:meth:`frame`'s arguments, in the C's order) and the
        fields it takes, or None when the C is off."""
        return (None if _native is None else _native.render), self._fields_bytes

    def _middle(self, queue_id: int) -> str:
        middle = self._middles.get(queue_id)
        if middle is None:
            middle = self._middles[queue_id] = f'{self._fields}{int(queue_id)}","f":"'
        return middle

    def frame(
        self,
        code: int,
        queue_id: int,
        opaque: int,
        born_ms: int,
        properties_json: str,
        body: bytes,
        sys_flag: int,
        flag: int,
        oneway: bool = False,
        signer: Signer | None = None,
        id_head: str = "",
        id_tail: int = -1,
    ) -> bytes:
        """A whole SEND_MESSAGE_V2 or SEND_BATCH_MESSAGE (``code``) request frame; ``properties_json`` is the
        properties text as a JSON string (``encode_basestring``), or with ``id_tail`` >= 0 that text up to its
        unique id (``PLAIN_JSON``'s), the id being ``id_head`` then ``id_tail`` in four hex digits; with
        ``signer`` (ACL), the same fields signed, through ``RemotingCommand``. Raises
        :class:`FrameTooLargeError` over the protocol's maximum."""
        if signer is None and _native is not None:
            frame: bytes | None = _native.render(
                code, ONEWAY_FLAG if oneway else 0, opaque, self._fields_bytes, queue_id, sys_flag, born_ms, flag,
                properties_json, id_head, id_tail, code == _BATCH, body,
            )  # fmt: skip
            if frame is not None:  # None also over MAX_FRAME_BYTES: the f-string's frame is refused below
                return frame
        if id_tail >= 0:
            properties_json = f'{properties_json}{id_head}{id_tail:04X}"'
        if signer is not None:
            fields = {
                "a": self._group,
                "b": self._topic,
                "c": AUTO_CREATE_TOPIC_KEY,
                "d": str(DEFAULT_TOPIC_QUEUE_NUMS),
                "e": str(queue_id),
                "f": str(sys_flag),
                "g": str(born_ms),
                "h": str(flag),
                "i": json.loads(properties_json),
                "j": "0",
                "k": "false",
                "m": "true" if code == _BATCH else "false",
            }
            command = RemotingCommand.request(code, opaque, ext_fields=signer(fields, body), body=body, oneway=oneway)
            head, body = command.encode_parts()
            return head + body
        header = (
            f'{{"code":{code},"flag":{ONEWAY_FLAG if oneway else 0},"language":"{_LANGUAGE}","opaque":{opaque}'
            f'{self._middles.get(queue_id) or self._middle(queue_id)}{sys_flag}","g":"{born_ms}","h":"{flag}",'
            f'"i":{properties_json},"j":"0","k":"false","m":"{"true" if code == _BATCH else "false"}"}}}}'
        ).encode()
        length = HEADER_LENGTH_FIELD_BYTES + len(header) + len(body)
        if length + LENGTH_PREFIX_BYTES > MAX_FRAME_BYTES:
            raise FrameTooLargeError(f"frame of {length + LENGTH_PREFIX_BYTES} bytes exceeds {MAX_FRAME_BYTES}")
        return b"".join((_PREFIX.pack(length, len(header)), header, body))
