"""A small declarative schema for RocketMQ "custom headers" (the extFields of a command).

A header is a frozen dataclass deriving from :class:`CommandHeader`. Each field's Python type
says how its string travels: ``str``, :data:`Int32` (Java ``Integer``), :data:`Int64` (Java
``Long``) or ``bool``; ``X | None`` with a default marks an optional (``@CFNullable``) field and
a field without a default a required (``@CFNotNull``) one. The wire key is the camelCase of the
attribute name unless :func:`wire_key` overrides it. Java's ``makeCustomHeaderToNet`` /
``decodeCommandCustomHeader`` become :meth:`CommandHeader.to_fields` /
:meth:`CommandHeader.from_fields`.

Example::

    >>> from dataclasses import dataclass
    >>> @dataclass(frozen=True, slots=True)
    ... class Demo(CommandHeader):
    ...     consumer_group: str
    ...     queue_id: Int32
    ...     client_id: str | None = wire_key("clientID", None)
    >>> Demo.from_fields({"consumerGroup": "g", "queueId": "3", "Signature": "ignored"})
    Demo(consumer_group='g', queue_id=3, client_id=None)
    >>> Demo("g", 3, "c").to_fields()
    {'consumerGroup': 'g', 'queueId': '3', 'clientID': 'c'}
"""

from __future__ import annotations

import dataclasses
import enum
import types
import typing
from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Self

from sparkmq.errors import InvalidFieldError

from .scalars import format_bool, parse_bool, parse_int


class _Kind(enum.Enum):
    STR = "str"
    INT32 = "int32"
    INT64 = "int64"
    BOOL = "bool"


#: A Java ``Integer`` header field: decimal string on the wire, int32 range.
Int32 = Annotated[int, _Kind.INT32]
#: A Java ``Long`` header field: decimal string on the wire, int64 range.
Int64 = Annotated[int, _Kind.INT64]


def wire_key(name: str, default: Any = dataclasses.MISSING) -> Any:
    """Declare a field whose wire key is not the camelCase of its name (``clientID``, ``a``)."""
    return dataclasses.field(default=default, metadata={"key": name})


@dataclasses.dataclass(frozen=True, slots=True)
class _Spec:
    attr: str
    key: str
    kind: _Kind
    required: bool

    @property
    def label(self) -> str:
        camel = camel_case(self.attr)
        return repr(self.key) if camel == self.key else f"{self.key!r} ({camel})"


class CommandHeader:
    """Base of the typed custom headers: ``from_fields`` validates, ``to_fields`` stringifies."""

    __slots__ = ()
    _specs_cache: ClassVar[dict[type, tuple[_Spec, ...]]] = {}

    @classmethod
    def specs(cls) -> tuple[_Spec, ...]:
        """The field specs of this header, in declaration order (built once per class)."""
        specs = CommandHeader._specs_cache.get(cls)
        if specs is None:
            specs = _build_specs(cls)
            CommandHeader._specs_cache[cls] = specs
        return specs

    @classmethod
    def from_fields(cls, ext_fields: Mapping[str, str]) -> Self:
        """Parse extFields; unknown keys (e.g. ``AccessKey``/``Signature``) are ignored.

        A missing required field or a malformed value raises :class:`InvalidFieldError`
        naming the field.
        """
        values: dict[str, object] = {}
        for spec in cls.specs():
            raw = ext_fields.get(spec.key)
            if raw is None:
                if spec.required:
                    raise InvalidFieldError(f"missing required header field {spec.label}", field=spec.key)
                continue
            values[spec.attr] = _parse(spec, raw)
        return cls(**values)

    def to_fields(self) -> dict[str, str]:
        """extFields for the wire: every value a string, None fields left out, declared order."""
        fields: dict[str, str] = {}
        for spec in self.specs():
            value = getattr(self, spec.attr)
            if value is None:
                continue
            if spec.kind is _Kind.BOOL:
                fields[spec.key] = format_bool(value)
            elif spec.kind is _Kind.STR:
                fields[spec.key] = value
            else:
                fields[spec.key] = str(int(value))
        return fields


_PLAIN_DIGITS = {_Kind.INT32: 9, _Kind.INT64: 18}  # this many ASCII digits are in range whatever they are


def _parse(spec: _Spec, raw: str) -> object:
    kind = spec.kind
    if kind is _Kind.STR:
        return raw
    if kind is _Kind.BOOL:
        return parse_bool(raw, spec.key)
    if len(raw) <= _PLAIN_DIGITS[kind] and raw.isdigit() and raw.isascii():
        return int(raw)  # what parse_int gives, without its regex
    return parse_int(raw, spec.key, bits=32 if kind is _Kind.INT32 else 64)


def camel_case(name: str) -> str:
    """The Java name of a snake_case field: ``broker_ip1`` → ``brokerIp1``."""
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def _build_specs(cls: type) -> tuple[_Spec, ...]:
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls.__name__} must be a dataclass to be a CommandHeader")
    hints = typing.get_type_hints(cls, include_extras=True)
    specs = []
    for f in dataclasses.fields(cls):
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        wire_name = f.metadata.get("key", camel_case(f.name))
        specs.append(_Spec(f.name, wire_name, _kind_of(cls, f.name, hints[f.name]), required))
    return tuple(specs)


def _kind_of(cls: type, name: str, hint: Any) -> _Kind:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        if len(args) != 1:
            raise TypeError(f"{cls.__name__}.{name}: unsupported union {hint!r}")
        hint = args[0]
    if typing.get_origin(hint) is Annotated:
        kinds = [m for m in hint.__metadata__ if isinstance(m, _Kind)]
        if kinds:
            return kinds[0]
    if hint is str:
        return _Kind.STR
    if hint is bool:
        return _Kind.BOOL
    raise TypeError(f"{cls.__name__}.{name}: use str, bool, Int32 or Int64, not {hint!r}")


__all__ = ["CommandHeader", "Int32", "Int64", "camel_case", "wire_key"]
