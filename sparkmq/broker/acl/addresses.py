"""Remote-address patterns of plain_acl.yml (RocketMQ's ``RemoteAddressStrategyFactory``).

A pattern is parsed once into a predicate over the client's IP text:

* blank: matches nothing; ``*``, ``*.*.*.*`` or ``*:*:*:*:*:*:*:*``: matches everything;
* one IPv4/IPv6 address (IPv6 compared in its expanded form);
* a comma list ``a,b,c`` or a brace list on the last segment ``192.168.1.{1,2,3}``;
* an IPv4 range with ``*`` or ``a-b`` from some segment on: ``192.168.*``, ``192.168.1.1-100``,
  ``10.*.*.*`` (a fixed segment after a ranged one is refused, as RocketMQ's ``AclUtils.verify``).

IPv6 ranges (``a:b:*``) are not supported: such a pattern is refused with a :class:`ValueError`
that the file loader reports with its line.

>>> parse_address_pattern("192.168.1.1-100")("192.168.1.42"), parse_address_pattern("")("1.2.3.4")
(True, False)
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

AddressMatcher = Callable[[str], bool]
_ALL = frozenset({"*", "*.*.*.*", "*:*:*:*:*:*:*:*"})


def normalise_ip(text: str) -> str:
    """IPv4 as is, IPv6 exploded and upper-case (``AclUtils.expandIP``), anything else unchanged."""
    try:
        address = ipaddress.ip_address(text.strip().strip("[]"))
    except ValueError:
        return text
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)  # a dual-stack socket's view of an IPv4 client
        return address.exploded.upper()
    return str(address)


def _exact(text: str) -> str:
    try:
        ipaddress.ip_address(text.strip())
    except ValueError:
        raise ValueError(f"{text.strip()!r} is not an IPv4 or IPv6 address") from None
    return normalise_ip(text)


def _never(_ip: str) -> bool:
    return False


def _always(_ip: str) -> bool:
    return True


def parse_address_pattern(pattern: str | None) -> AddressMatcher:
    """A predicate for one plain_acl.yml address pattern; :class:`ValueError` names what is wrong."""
    text = "" if pattern is None else str(pattern).strip()
    if not text:
        return _never
    if text in _ALL:
        return _always
    if text.endswith("}"):
        head, brace, tail = text.rpartition("{")
        if not brace or not head or head[-1] not in ".:":
            raise ValueError(f"{text!r}: a brace list must be the last segment, as 192.168.1.{{1,2}}")
        return _one_of({_exact(head + item) for item in tail[:-1].split(",") if item.strip()})
    if "," in text:
        return _one_of({_exact(item) for item in text.split(",") if item.strip()})
    if "*" in text or "-" in text:
        return _ipv4_range(text)
    one = _exact(text)
    return lambda ip: ip == one


def _one_of(addresses: set[str]) -> AddressMatcher:
    frozen = frozenset(addresses)
    return lambda ip: ip in frozen


def _ipv4_range(text: str) -> AddressMatcher:
    if ":" in text:
        raise ValueError(f"{text!r}: IPv6 address ranges are not supported (list the addresses instead)")
    segments = [s.strip() for s in text.split(".")]
    if len(segments) > 4 or not segments[0].isdigit():
        raise ValueError(f"{text!r} is not an IPv4 range such as 192.168.*.* or 192.168.1.1-100")
    bounds: list[tuple[int, int]] = []
    ranged = False
    for segment in segments + ["*"] * (4 - len(segments)):
        low, high = _segment_bounds(text, segment)
        if ranged and (low, high) != (0, 255):
            raise ValueError(f"{text!r}: after a ranged segment the others must be *")
        ranged = ranged or low != high
        bounds.append((low, high))
    frozen = tuple(bounds)

    def match(ip: str) -> bool:
        parts = ip.split(".")
        if len(parts) != 4 or not all(p.isdigit() for p in parts):
            return False
        return all(low <= int(p) <= high for p, (low, high) in zip(parts, frozen, strict=False))

    return match


def _segment_bounds(text: str, segment: str) -> tuple[int, int]:
    if segment == "*":
        return 0, 255
    low_text, dash, high_text = segment.partition("-")
    if not low_text.isdigit() or (dash and not high_text.isdigit()):
        raise ValueError(f"{text!r}: segment {segment!r} is not a number, a-b or *")
    low, high = int(low_text), int(high_text) if dash else int(low_text)
    if not 0 <= low <= high <= 255:
        raise ValueError(f"{text!r}: segment {segment!r} is not within 0..255 with start <= end")
    return low, high


__all__ = ["AddressMatcher", "normalise_ip", "parse_address_pattern"]
