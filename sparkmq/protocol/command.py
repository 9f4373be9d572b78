"""RemotingCommand: one request or response of the RocketMQ 4.x remoting protocol.

A frame is ``int32 length | int32 serializeType<<24 | headerLength | header | body``, all
big-endian, where ``length`` does not count itself (``RemotingCommand.encode`` in Java).

* :meth:`RemotingCommand.encode` always writes a **JSON header with type byte 0**: C++ 1.2.3
  and ali-ons read the header-length int without masking the type byte, so a binary
  (ROCKETMQ) header would look like a ~16 MiB header to them.
* The JSON key order mimics what both real clients were verified against: fastjson's
  alphabetical order, ``extFields`` last, ``remark`` left out when None, ``extFields`` always
  present (C++ 1.2.3 dereferences it without a null check: a SEND response without it
  crashed the client process).
* Decoding accepts JSON (type 0) and ROCKETMQ binary (type 1) headers. JSON extFields values
  that are numbers or booleans (C++ and ali-ons send them) become strings; booleans become
  ``"true"``/``"false"``, Java's ``Boolean.toString``.
* A decoded *request* whose remark or extFields hold a lone surrogate, a NUL or an over-long
  value carries :attr:`RemotingCommand.defect`: the connection answers it with that error and
  never hands it to a processor. Encoding escapes lone surrogates instead of failing, so any
  response can be sent, whatever text it echoes.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from sparkmq.errors import FrameTooLargeError, InvalidFieldError, ProtocolError

from .codes import (
    BINARY_HEADER_FIXED_BYTES,
    DEFAULT_LANGUAGE,
    DEFAULT_VERSION,
    HEADER_LENGTH_FIELD_BYTES,
    INT32_MAX,
    INT32_MIN,
    LENGTH_PREFIX_BYTES,
    MAX_FRAME_BYTES,
    MAX_HEADER_BYTES,
    ONEWAY_FLAG,
    RESPONSE_FLAG,
    LanguageCode,
    ResponseCode,
    SerializeType,
)
from .scalars import ext_value, is_java_integer, java_integer
from .wire_text import MAX_FIELD_CHARS, encodable, request_text_defect

if TYPE_CHECKING:
    from .plain_header import PlainHeader

_PREFIX = struct.Struct(">II")  # length, serializeType << 24 | headerLength
_HEADER_LENGTH = struct.Struct(">I")
_BINARY_FIXED = struct.Struct(">hBhiii")  # code, language, version, opaque, flag, remarkLength
_INT32 = struct.Struct(">i")
_INT16 = struct.Struct(">h")
_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_LANGUAGES = LanguageCode.__members__

#: JSON headers the reference decodes before the msgspec fast path (:mod:`.plain_header`) is loaded.
#: Its import (~6 ms: msgspec and typing_extensions) pays for itself after ~1,000 headers (~5 µs
#: saved per decode, ~1.5 µs per encode); Spark's per-query source runner exchanges ~100 per query.
#: The remoting layer's long-lived services load it at once (:func:`load_fast_path`).
FAST_PATH_AFTER_HEADERS = 1024
_headers_before_fast_path = FAST_PATH_AFTER_HEADERS
#: The fast path's functions once loaded (None before, or without msgspec).
decode_plain_header: Callable[[bytes], PlainHeader] | None = None
PLAIN_HEADER_ERRORS: tuple[type[BaseException], ...] = ()


def load_fast_path() -> bool:
    """Decode and encode JSON headers with :mod:`.plain_header` from now on; False without msgspec.

    Both paths give the same bytes and commands (tests/protocol/test_fast_paths.py).
    """
    global decode_plain_header, PLAIN_HEADER_ERRORS, _encode_string_map, _decode_header, _headers_before_fast_path
    _headers_before_fast_path = 0
    _decode_header = _decode_json_header  # counting stops either way
    if decode_plain_header is None:
        try:
            from . import plain_header
        except ImportError:  # msgspec is missing: the general decoder reads every header
            return False
        PLAIN_HEADER_ERRORS = plain_header.PLAIN_HEADER_ERRORS
        _encode_string_map = plain_header.encode_string_map
        decode_plain_header = plain_header.decode_plain_header
    return True


@dataclass(slots=True, repr=False)
class RemotingCommand:
    """One remoting request or response; ``encode()`` gives the whole frame.

    Treat it as immutable (use :func:`dataclasses.replace`): it is not frozen only because a
    frozen dataclass's ``__init__`` costs ~1.5 µs more, twice per request served.

    ``serialize_type`` records how a decoded command arrived; encoding always writes JSON
    (:meth:`encode_rocketmq` exists for Java peers and tests, and refuses responses).

    Example::

        >>> req = RemotingCommand(code=14, opaque=9, ext_fields={"topic": "T"})
        >>> resp = req.make_response(ext_fields={"offset": "0"})
        >>> (resp.opaque, resp.is_response, resp.encode()[8:30])
        (9, True, b'{"code":0,"flag":1,"la')
        >>> RemotingCommand.decode(resp.encode()[4:]) == resp
        True
    """

    code: int
    language: LanguageCode = DEFAULT_LANGUAGE
    version: int = DEFAULT_VERSION
    opaque: int = 0
    flag: int = 0
    remark: str | None = None
    ext_fields: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    serialize_type: SerializeType = SerializeType.JSON
    #: Set on a decoded request whose text is unfit (see :mod:`.wire_text`); answer it, never serve it.
    defect: InvalidFieldError | None = field(default=None, compare=False)

    @classmethod
    def request(
        cls,
        code: int,
        opaque: int,
        *,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
        oneway: bool = False,
    ) -> RemotingCommand:
        """A request as sparkmq sends it (language JAVA, version 407), oneway bit if asked."""
        return cls(
            code=int(code),
            opaque=opaque,
            flag=ONEWAY_FLAG if oneway else 0,
            ext_fields={} if ext_fields is None else ext_fields,
            body=body,
        )

    @property
    def is_response(self) -> bool:
        """``flag`` bit 0 (RPC_TYPE) is set."""
        return bool(self.flag & RESPONSE_FLAG)

    @property
    def is_oneway(self) -> bool:
        """``flag`` bit 1 (RPC_ONEWAY) is set; real C++/ali-ons clients never set it."""
        return bool(self.flag & ONEWAY_FLAG)

    def make_response(
        self,
        code: int = ResponseCode.SUCCESS,
        *,
        remark: str | None = None,
        ext_fields: dict[str, str] | None = None,
        body: bytes = b"",
    ) -> RemotingCommand:
        """The response to this request: same opaque, flag = response, always JSON."""
        return RemotingCommand(
            int(code),
            DEFAULT_LANGUAGE,
            DEFAULT_VERSION,
            self.opaque,
            RESPONSE_FLAG,
            remark,
            {} if ext_fields is None else ext_fields,
            body,
        )

    def encode_parts(self) -> tuple[bytes, bytes]:
        """``(length prefix + header-length int + JSON header, body)``: write both, in order.

        Handing the body over separately spares one copy of a large PULL body
        (``transport.writelines``); the two parts still form one frame.
        """
        header = _encode_json_header(self)
        return _frame_head(header, len(self.body), SerializeType.JSON), self.body

    def encode(self) -> bytes:
        """The whole frame, length prefix included, with a JSON header."""
        head, body = self.encode_parts()
        return head + body if body else head

    def encode_rocketmq(self) -> bytes:
        """The whole frame with a ROCKETMQ binary header, as Java peers may send requests.

        Responses are refused: the C++ client would misread the type byte as header length.
        """
        if self.is_response:
            raise ValueError("responses are always JSON: C++ 1.2.3 does not mask the type byte")
        header = _encode_binary_header(self)
        return _frame_head(header, len(self.body), SerializeType.ROCKETMQ) + self.body

    @classmethod
    def decode(cls, payload: bytes | bytearray | memoryview) -> RemotingCommand:
        """Decode one frame payload: everything after the 4-byte length prefix."""
        with memoryview(payload) as view:
            return decode_payload(view)

    def __repr__(self) -> str:
        kind = "response" if self.is_response else "request"
        return (
            f"RemotingCommand({kind} code={self.code}, opaque={self.opaque}, flag={self.flag}, "
            f"language={self.language.name}, version={self.version}, remark={self.remark!r}, "
            f"ext_fields={self.ext_fields!r}, body=<{len(self.body)} bytes>)"
        )


def decode_payload(view: memoryview) -> RemotingCommand:
    """Decode ``serTypeAndHeaderLen | header | body`` from a memoryview; copies the body once."""
    if len(view) < HEADER_LENGTH_FIELD_BYTES:
        raise ProtocolError(f"frame payload of {len(view)} bytes has no header-length field")
    (mixed,) = _HEADER_LENGTH.unpack_from(view, 0)
    serialize_type, header_length = mixed >> 24, mixed & MAX_HEADER_BYTES
    header_end = HEADER_LENGTH_FIELD_BYTES + header_length
    if header_end > len(view):
        raise ProtocolError(f"header length {header_length} exceeds the frame payload of {len(view)} bytes")
    header = bytes(view[HEADER_LENGTH_FIELD_BYTES:header_end])
    body = bytes(view[header_end:])
    if serialize_type == SerializeType.JSON:
        return _decode_header(header, body)
    if serialize_type == SerializeType.ROCKETMQ:
        return _decode_binary_header(header, body)
    raise ProtocolError(f"unknown serialize type {serialize_type} (0 = JSON, 1 = ROCKETMQ)")


# --- encoding --------------------------------------------------------------------------------


def _frame_head(header: bytes, body_length: int, serialize_type: SerializeType) -> bytes:
    if len(header) > MAX_HEADER_BYTES:
        raise FrameTooLargeError(f"header of {len(header)} bytes exceeds the 24-bit header length")
    length = HEADER_LENGTH_FIELD_BYTES + len(header) + body_length
    if length + LENGTH_PREFIX_BYTES > MAX_FRAME_BYTES:
        raise FrameTooLargeError(f"frame of {length + LENGTH_PREFIX_BYTES} bytes exceeds {MAX_FRAME_BYTES}")
    return _PREFIX.pack(length, (int(serialize_type) << 24) | len(header)) + header


def _check_encodable(cmd: RemotingCommand) -> None:
    for name in ("code", "opaque", "flag", "version"):
        value = getattr(cmd, name)
        if not isinstance(value, int) or not INT32_MIN <= value <= INT32_MAX:
            raise ValueError(f"RemotingCommand.{name} must be an int32, got {value!r}")
    for key, value in cmd.ext_fields.items():
        # A number here would reach C++ 1.2.3 as 0 (it reads only JSON strings): refuse it.
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"ext_fields must map str to str; {key!r} -> {value!r}")


def _encode_json_header(cmd: RemotingCommand) -> bytes:
    _check_encodable(cmd)
    remark = "" if cmd.remark is None else f',"remark":{_dumps(cmd.remark)}'
    text = (
        f'{{"code":{int(cmd.code)},"flag":{int(cmd.flag)},"language":"{cmd.language.name}",'
        f'"opaque":{int(cmd.opaque)}{remark},"serializeTypeCurrentRPC":"JSON",'
        f'"version":{int(cmd.version)},"extFields":'
    )
    try:
        return text.encode("utf-8") + _encode_string_map(cmd.ext_fields) + b"}"
    except UnicodeEncodeError:  # a lone surrogate, e.g. echoed from a request: escape, never fail
        return _encode_json_header(_escaped(cmd))


def _dumps_string_map(fields: dict[str, str]) -> bytes:
    """The reference of ``plain_header.encode_string_map``: compact JSON, non-ASCII as UTF-8."""
    return _dumps(fields).encode("utf-8")


_encode_string_map = _dumps_string_map  # until load_fast_path()


def _escaped(cmd: RemotingCommand) -> RemotingCommand:
    return RemotingCommand(
        code=cmd.code,
        language=cmd.language,
        version=cmd.version,
        opaque=cmd.opaque,
        flag=cmd.flag,
        remark=None if cmd.remark is None else encodable(cmd.remark),
        ext_fields={encodable(k): encodable(v) for k, v in cmd.ext_fields.items()},
    )


def _encode_binary_header(cmd: RemotingCommand) -> bytes:
    _check_encodable(cmd)
    for name in ("code", "version"):
        if not -(2**15) <= getattr(cmd, name) < 2**15:
            raise ValueError(f"ROCKETMQ headers carry {name} as int16, got {getattr(cmd, name)}")
    remark = _utf8(cmd.remark) if cmd.remark else b""
    parts = [_BINARY_FIXED.pack(cmd.code, cmd.language, cmd.version, cmd.opaque, cmd.flag, len(remark)), remark]
    ext = bytearray()
    for key, value in cmd.ext_fields.items():
        raw_key, raw_value = _utf8(key), _utf8(value)
        if len(raw_key) >= 2**15:
            raise ValueError(f"ROCKETMQ header keys are at most 32767 bytes, got {len(raw_key)}")
        ext += _INT16.pack(len(raw_key)) + raw_key + _INT32.pack(len(raw_value)) + raw_value
    parts += [_INT32.pack(len(ext)), bytes(ext)]
    return b"".join(parts)


def _utf8(text: str) -> bytes:
    return encodable(text).encode("utf-8")


# --- decoding --------------------------------------------------------------------------------


def _reject_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _decode_counting(raw: bytes, body: bytes) -> RemotingCommand:
    """The reference decode, until :data:`FAST_PATH_AFTER_HEADERS` headers call for the fast path."""
    global _headers_before_fast_path
    _headers_before_fast_path -= 1
    if _headers_before_fast_path <= 0:
        load_fast_path()
    return _decode_json_header(raw, body)


def _decode_json_header(raw: bytes, body: bytes) -> RemotingCommand:
    """The header's command: the typed decode of :mod:`.plain_header` where it applies (the
    same command, ~5x faster), else the general decoder, the reference for every other shape."""
    if decode_plain_header is None:
        return _decode_any_json_header(raw, body)
    try:
        plain = decode_plain_header(raw)
    except PLAIN_HEADER_ERRORS:
        return _decode_any_json_header(raw, body)
    ext = {} if plain.ext_fields is None else plain.ext_fields
    flag, remark = plain.flag, plain.remark
    suspect = _suspect(raw)
    return RemotingCommand(
        plain.code,
        _language(plain.language),
        plain.version,
        plain.opaque,
        flag,
        remark,
        ext,
        body,
        SerializeType.JSON,
        request_text_defect(remark, ext) if suspect and not flag & RESPONSE_FLAG else None,
    )


def _decode_any_json_header(raw: bytes, body: bytes) -> RemotingCommand:
    try:
        # jsoncpp (C++) ends the header with "\n"; json.loads allows trailing whitespace.
        obj = json.loads(raw.decode("utf-8"), parse_constant=_reject_constant)
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"JSON header is not UTF-8: {exc}") from exc
    except (ValueError, RecursionError) as exc:
        raise ProtocolError(f"header is not valid JSON: {exc}") from exc
    if not isinstance(obj, dict):
        raise ProtocolError(f"JSON header is a {type(obj).__name__}, not an object")
    ext_raw = obj.get("extFields")
    if ext_raw is None:
        ext: dict[str, str] = {}
    elif isinstance(ext_raw, dict):
        ext = {k: s for k, v in ext_raw.items() if (s := ext_value(k, v)) is not None}
    else:
        raise ProtocolError(f"extFields is a JSON {type(ext_raw).__name__}, not an object")
    flag = _header_int(obj, "flag", 0)
    remark = ext_value("remark", obj.get("remark"))
    suspect = _suspect(raw)
    return RemotingCommand(
        code=_header_int(obj, "code", None),
        language=_language(obj.get("language")),
        version=_header_int(obj, "version", 0),
        opaque=_header_int(obj, "opaque", None),
        flag=flag,
        remark=remark,
        ext_fields=ext,
        body=body,
        serialize_type=SerializeType.JSON,
        defect=request_text_defect(remark, ext) if suspect and not flag & RESPONSE_FLAG else None,
    )


def _suspect(raw: bytes) -> bool:
    """Whether the header may hold an unfit text (see :mod:`.wire_text`), so it must be checked.

    Raw UTF-8 cannot encode a surrogate or a NUL in JSON text: only a ``\\u0000`` or
    ``\\uD8xx``..``\\uDFxx`` escape yields one (the properties' ``\\u0001``/``\\u0002``
    separators in every send do not); an over-long value needs an over-long header.
    """
    return b"\\u0000" in raw or b"\\ud" in raw or b"\\uD" in raw or len(raw) > MAX_FIELD_CHARS


def _header_int(obj: dict[str, object], key: str, default: int | None) -> int:
    value = obj.get(key)
    if value is None:
        if default is None:
            raise ProtocolError(f"JSON header has no {key!r}")
        return default
    if isinstance(value, str) and is_java_integer(value):
        value = java_integer(value)  # fastjson would coerce a numeric string into the int field
    if isinstance(value, bool) or not isinstance(value, int) or not INT32_MIN <= value <= INT32_MAX:
        raise ProtocolError(f"JSON header {key!r} is not an int32: {str(value)[:40]!r}")
    return value


def _language(value: object) -> LanguageCode:
    # Java's default is JAVA; an unknown name or byte maps to OTHER rather than failing.
    if value is None:
        return LanguageCode.JAVA
    if isinstance(value, str):
        return _LANGUAGES.get(value, LanguageCode.OTHER)
    if isinstance(value, int) and not isinstance(value, bool):
        return LanguageCode(value) if value in LanguageCode._value2member_map_ else LanguageCode.OTHER
    raise ProtocolError(f"JSON header 'language' is a {type(value).__name__}")


def _decode_binary_header(raw: bytes, body: bytes) -> RemotingCommand:
    if len(raw) < BINARY_HEADER_FIXED_BYTES:
        raise ProtocolError(f"truncated ROCKETMQ header: {len(raw)} of at least {BINARY_HEADER_FIXED_BYTES} bytes")
    code, language, version, opaque, flag, remark_length = _BINARY_FIXED.unpack_from(raw, 0)
    position = _BINARY_FIXED.size
    remark_bytes, position = _take(raw, position, remark_length, len(raw) - 4, "remark")
    (ext_length,) = _INT32.unpack_from(raw, position)
    position += 4
    ext_bytes, position = _take(raw, position, ext_length, len(raw), "extFields")
    if position != len(raw):
        raise ProtocolError(f"ROCKETMQ header has {len(raw) - position} trailing bytes")
    remark = _text(remark_bytes) if remark_bytes else None  # length 0 decodes as null in Java
    ext_fields = _decode_binary_map(ext_bytes)
    return RemotingCommand(
        code=code,
        language=LanguageCode(language) if language in LanguageCode._value2member_map_ else LanguageCode.OTHER,
        version=version,
        opaque=opaque,
        flag=flag,
        remark=remark,
        ext_fields=ext_fields,
        body=body,
        serialize_type=SerializeType.ROCKETMQ,
        defect=None if flag & RESPONSE_FLAG else request_text_defect(remark, ext_fields),
    )


def _decode_binary_map(raw: bytes) -> dict[str, str]:
    fields: dict[str, str] = {}
    position = 0
    while position < len(raw):
        if position + 2 > len(raw):
            raise ProtocolError("truncated ROCKETMQ extFields: no room for a key length")
        (key_length,) = _INT16.unpack_from(raw, position)
        key, position = _take(raw, position + 2, key_length, len(raw), "extFields key")
        if position + 4 > len(raw):
            raise ProtocolError("truncated ROCKETMQ extFields: no room for a value length")
        (value_length,) = _INT32.unpack_from(raw, position)
        value, position = _take(raw, position + 4, value_length, len(raw), "extFields value")
        fields[_text(key)] = _text(value)
    return fields


def _take(raw: bytes, position: int, length: int, limit: int, what: str) -> tuple[bytes, int]:
    end = position + length
    if length < 0 or end > limit:
        raise ProtocolError(f"truncated ROCKETMQ header: {what} of {length} bytes at offset {position}")
    return raw[position:end], end


def _text(raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProtocolError(f"ROCKETMQ header text is not UTF-8: {exc}") from exc


_decode_header = _decode_counting  # decode_payload's JSON decoder: _decode_json_header after load_fast_path()

__all__ = ["FAST_PATH_AFTER_HEADERS", "RemotingCommand", "decode_payload", "load_fast_path"]
