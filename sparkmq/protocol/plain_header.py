"""The accelerated JSON header codec: one typed msgspec decode of the shape real clients send,
and the encode of a response's extFields.

A header whose numbers are int32s and whose remark, language and extFields values are strings
decodes here in C, with no dict of Python objects to walk. Anything else (a numeric string
for ``code``, a number in extFields, a bad byte, deep nesting) raises one of
:data:`PLAIN_HEADER_ERRORS`, and ``command._decode_any_json_header``, the pure reference,
decodes it or names the fault. Both give the same command for every header this one accepts
(tests/protocol/test_fast_paths.py compares them). msgspec is optional: without it
``command`` uses the reference alone. ``command`` loads this module once it has decoded
``FAST_PATH_AFTER_HEADERS`` headers, or at once in the remoting layer (``load_fast_path``).

Example::

    >>> decode_plain_header(b'{"code":10,"opaque":3,"extFields":{"a":"P"}}').ext_fields
    {'a': 'P'}
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, TypeVar

import msgspec

from .codes import INT32_MAX, INT32_MIN

_Int32 = Annotated[int, msgspec.Meta(ge=INT32_MIN, le=INT32_MAX)]


class PlainHeader(msgspec.Struct):
    """The fields of a JSON header in their plain types; unknown keys are skipped."""

    code: _Int32
    opaque: _Int32
    flag: _Int32 = 0
    version: _Int32 = 0
    language: str | None = None
    remark: str | None = None
    ext_fields: dict[str, str] | None = msgspec.field(default=None, name="extFields")


_Header = TypeVar("_Header", bound=PlainHeader)


#: What :func:`decode_plain_header` raises for a header it leaves to the reference decoder
#: (ValueError: not UTF-8; RecursionError: nested too deep).
PLAIN_HEADER_ERRORS = (msgspec.MsgspecError, ValueError, RecursionError)


#: ``extFields`` as compact JSON bytes, byte for byte what ``json`` with ``ensure_ascii=False``
#: writes; a lone surrogate raises UnicodeEncodeError, as the reference's UTF-8 encode does.
encode_string_map: Callable[[dict[str, str]], bytes] = msgspec.json.Encoder().encode


def plain_decoder(kind: type[_Header]) -> Callable[[bytes], _Header]:
    """The decode of headers of the plain shape as ``kind`` (PlainHeader or a subclass of it)."""
    decode = msgspec.json.Decoder(kind).decode

    def decode_plain(raw: bytes) -> _Header:
        """Decode ``raw`` if it has the plain shape, else raise one of :data:`PLAIN_HEADER_ERRORS`."""
        if not raw.isascii():
            raw.decode("utf-8")  # msgspec does not check the text of the keys it skips
        return decode(raw)

    return decode_plain


decode_plain_header = plain_decoder(PlainHeader)


__all__ = ["PLAIN_HEADER_ERRORS", "PlainHeader", "decode_plain_header", "encode_string_map", "plain_decoder"]
