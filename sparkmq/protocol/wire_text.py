"""Strings from the wire: what a request may carry, and how any text is made encodable.

A JSON header can smuggle text no RocketMQ peer and no file can hold: a lone surrogate
(``"\\ud800"`` decodes to a Python str that UTF-8 cannot encode), a NUL (``"\\u0000"``: a C
string ends there, a path cannot hold it), or a value as long as the 16 MiB frame. Such a
request is refused where it is decoded (:func:`request_text_defect`), answered with an error
naming the field, and never reaches a processor or a table. Text going out is made encodable
with :func:`encodable` (escape, never fail), so every request can be answered.

Example::

    >>> request_text_defect(None, {"topic": "T", "topicFilterType": "\\ud800"}).remark
    "header field 'topicFilterType' holds a lone surrogate U+D800 at index 0"
    >>> encodable("Nope\\ud800")
    'Nope\\\\ud800'
"""

from __future__ import annotations

from collections.abc import Mapping

from sparkmq.errors import InvalidFieldError

#: Longest header value (and key) accepted, in characters: ``Short.MAX_VALUE``, RocketMQ's limit
#: on a message's properties string (``MessageDecoder``), the longest value a real client sends.
MAX_FIELD_CHARS = 32_767
#: How much of an offending name a remark quotes.
_QUOTE_CHARS = 40


def quote(text: str) -> str:
    """``repr`` of at most 40 characters of ``text``, ASCII only: safe in any remark or log."""
    return ascii(text[:_QUOTE_CHARS])


def text_defect(text: str, max_chars: int | None = MAX_FIELD_CHARS) -> str | None:
    """What makes ``text`` unfit for a header or a stored name, or None if it is fine."""
    if max_chars is not None and len(text) > max_chars:
        return f"is {len(text)} characters long, over the limit of {max_chars}"
    if text.isascii():
        nul = text.find("\x00")
        return None if nul < 0 else f"holds a NUL character at index {nul}"
    nul = text.find("\x00")
    if nul >= 0:
        return f"holds a NUL character at index {nul}"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return f"holds a lone surrogate U+{ord(text[exc.start]):04X} at index {exc.start}"
    return None


def request_text_defect(remark: str | None, ext_fields: Mapping[str, str]) -> InvalidFieldError | None:
    """The first unfit string among a request's remark and extFields (keys and values), or None."""
    if remark is not None and (problem := text_defect(remark)) is not None:
        return InvalidFieldError(f"header field 'remark' {problem}", field="remark")
    for key, value in ext_fields.items():
        if (problem := text_defect(key)) is not None:
            return InvalidFieldError(f"header field name {quote(key)} {problem}", field=quote(key))
        if (problem := text_defect(value)) is not None:
            return InvalidFieldError(f"header field {quote(key)} {problem}", field=key)
    return None


def encodable(text: str) -> str:
    """``text`` with every lone surrogate written as the six characters ``\\udXXX``.

    Anything else is left as it is; the result always encodes as UTF-8.
    """
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


__all__ = ["MAX_FIELD_CHARS", "encodable", "quote", "request_text_defect", "text_defect"]
