"""OTLP's trace messages as protobuf bytes, written by hand for the few fields levergate sends.

The wire is opentelemetry-proto's `ExportTraceServiceRequest` (collector/trace/v1), what an
OTLP/HTTP collector takes at `/v1/traces` as `application/x-protobuf`; tests/unit/otel decodes
what this module writes with opentelemetry-proto's own classes and compares field by field.
Written by hand because the spans are fixed in shape and built off the request path in bulk:
the SDK's span objects, attribute checks and its encoder (which builds the protobuf classes'
objects field by field before serialising them) cost ~0.5 ms of CPU per traced request
(benchmarks/results/otel_profile.md); here a span is a few byte strings joined, its attribute
keys encoded once per exporter.

Protobuf's wire format (https://protobuf.dev/programming-guides/encoding/): a field is a tag
(field number << 3 | wire type) then its value: a varint (type 0), 8 bytes little-endian
(type 1: fixed64, double), a length and that many bytes (type 2: strings, bytes, nested
messages), or 4 bytes little-endian (type 5: fixed32). Fields are written in field-number order,
as protobuf's own serialisers do, but for a span's: its own fields (ids, times, some
attributes) go first and the fields it shares with many spans (name, kind, most attributes,
status, flags) after, kept encoded by the caller (otel/spans.py writes a request span's ids
and times last instead, packed in one call with its first attempt's) — parsers take fields in
any order, as the encoding guide requires. Fields at their default value are left out.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "CLIENT",
    "INTERNAL",
    "SERVER",
    "STATUS_ERROR",
    "U64",
    "AttributeWriter",
    "export_request",
    "head",
    "head_ids",
    "head_ids_parent",
    "ids",
    "ids_parent",
    "pack_double",
    "span",
    "span_constant",
    "span_field",
    "times",
]

# Span.SpanKind and Status.StatusCode (opentelemetry/proto/trace/v1/trace.proto).
INTERNAL, SERVER, CLIENT = 1, 2, 3
STATUS_ERROR = 2
# Span.flags (SpanFlags): the W3C trace flags in the low byte (sampled), and whether the parent
# is known to be remote (bit 8: known; bit 9: remote), as the SDK's exporter sets them.
SAMPLED = 0x01
HAS_IS_REMOTE = 0x100
IS_REMOTE = 0x200

_ONE_BYTE = tuple(bytes((n,)) for n in range(128))
_U64 = U64 = (1 << 64) - 1
pack_double = struct.Struct("<d").pack
_pack_fixed32 = struct.Struct("<I").pack
# A span's fixed-size fields, tags included: the ids (big-endian, as W3C writes them), the
# parent and the times (fixed64, little-endian); flags (field 16, fixed32).
_parent = struct.Struct(">HQ").pack
times = struct.Struct("<BQBQ").pack
# The same with the span's field head (ScopeSpans.spans, field 2: its tag and a length of two
# varint bytes, `128 <= size < 16384`, every span levergate writes but a huge one) first:
# `head_ids(0x12, (size & 0x7F) | 0x80, size >> 7, 0x0A10, trace_id >> 64, trace_id & _U64,
# 0x1208, span_id[, 0x2208, parent_id])`: a span but its times, attributes and constant part in
# one call.
head_ids = struct.Struct(">BBBHQQHQ").pack
head_ids_parent = struct.Struct(">BBBHQQHQHQ").pack
ids = struct.Struct(">HQQHQ").pack
ids_parent = struct.Struct(">HQQHQHQ").pack
IDS_SIZE, IDS_PARENT_SIZE, TIMES_SIZE = 28, 38, 18  # the ids' bytes (no parent, a parent), times'
_FLAGS_LOCAL = b"\x85\x01" + _pack_fixed32(SAMPLED | HAS_IS_REMOTE)
_FLAGS_REMOTE = b"\x85\x01" + _pack_fixed32(SAMPLED | HAS_IS_REMOTE | IS_REMOTE)
_MAX_KEYS = 4096  # attribute keys kept encoded (levergate's are a few dozen)
_MAX_CACHED = 4096  # whole attribute fields kept encoded: ~100 bytes each
_MAX_CACHED_CHARS = 64  # the longest string value kept so


def varint(n: int) -> bytes:
    """`n` (unsigned, or an int64 as its two's complement) as a protobuf varint."""
    if 0 <= n < 128:
        return _ONE_BYTE[n]
    n &= _U64
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, value: bytes) -> bytes:
    """A length-delimited field: `tag`, the length, the bytes."""
    size = len(value)
    return tag + (_ONE_BYTE[size] if size < 128 else varint(size)) + value


def any_value(value: Any) -> bytes:
    """An `AnyValue`'s bytes: string 1, bool 2, int64 3, double 4, array 5 (of AnyValue)."""
    if isinstance(value, str):
        return _field(b"\x0a", value.encode())
    if value is True:
        return b"\x10\x01"
    if value is False:
        return b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + varint(value)
    if isinstance(value, float):
        return b"\x21" + pack_double(value)
    if isinstance(value, list | tuple):
        return _field(b"\x2a", b"".join(_field(b"\x0a", any_value(v)) for v in value))
    raise TypeError(f"an attribute value must be str, bool, int, float or a list of those, "
                    f"not {type(value).__name__}")  # fmt: skip


class AttributeWriter:
    """`KeyValue` fields under one tag (a span's attributes are field 9, a resource's field 1).
    A `None` value is left out (the SDK drops it too). Most attributes repeat from request to
    request (the operation, the model, the outcome, the token counts...): a key with a short
    string or an int keeps its whole field's bytes, up to `_MAX_CACHED` of them (then the kept
    ones are forgotten and kept again as they come)."""

    def __init__(self, tag: bytes) -> None:
        self._tag = tag
        self._keys: dict[str, bytes] = {}
        self._fields: dict[tuple[str, Any], bytes] = {}

    def write(self, attributes: Mapping[str, Any]) -> bytes:
        fields, parts = self._fields, []
        for item in attributes.items():
            value = item[1]
            kind = type(value)
            # Only exact str and int: 1 == 1.0 == True, and those must stay apart.
            if kind is int or (kind is str and len(value) <= _MAX_CACHED_CHARS):
                found = fields.get(item)
                if found is None:
                    if len(fields) >= _MAX_CACHED:
                        fields.clear()
                    found = fields[item] = self._field(*item)
                parts.append(found)
            elif value is not None:
                parts.append(self._field(*item))
        return b"".join(parts)

    def string(self, key: str, value: str) -> bytes:
        """The field of one string attribute (one never seen again: a request id)."""
        data = value.encode()
        size = len(data)
        if size > 100:
            return self._field(key, value)
        head = self._keys.get(key) or self._head(key)
        inner = len(head) + size + 3  # the value's length, its tag, the string's length
        if inner >= 128:
            return self._field(key, value)
        return b"".join((self._tag, _ONE_BYTE[inner], head, _ONE_BYTE[size + 2], b"\x0a",
                         _ONE_BYTE[size], data))  # fmt: skip

    def double_head(self, key: str) -> bytes:
        """The field of a double attribute but its value's 8 bytes (`pack_double`)."""
        return self._field(key, 0.0)[:-8]

    def _field(self, key: str, value: Any) -> bytes:
        head = self._keys.get(key) or self._head(key)
        return _field(self._tag, head + _length(any_value(value)))

    def _head(self, key: str) -> bytes:
        """A `KeyValue`'s key field, then its value's tag."""
        head = _field(b"\x0a", key.encode()) + b"\x12"
        if len(self._keys) < _MAX_KEYS:
            self._keys[key] = head
        return head


def _length(value: bytes) -> bytes:
    size = len(value)
    return (_ONE_BYTE[size] if size < 128 else varint(size)) + value


def span(
    *,
    trace_id: int,
    span_id: int,
    parent_id: int | None,
    name: str,
    kind: int,
    start_ns: int,
    end_ns: int,
    attributes: bytes,
    error: str | None = None,
    remote_parent: bool = False,
) -> bytes:
    """One `Span` as a field of its `ScopeSpans` (field 2: tag, length, the span's bytes);
    `attributes` from `AttributeWriter(b"\\x4a")`; `error`: the status is ERROR with that
    message."""
    constant = span_constant(name=name, kind=kind, attributes=attributes, error=error,
                             remote_parent=remote_parent)  # fmt: skip
    return span_field(constant, trace_id, span_id, parent_id, start_ns, end_ns)


def span_constant(
    *, name: str, kind: int, attributes: bytes, error: str | None, remote_parent: bool
) -> bytes:
    """The fields of a span that many spans share (its name, kind, status, flags and the
    attributes given), for `span_field`: a protobuf parser takes fields in any order, so the
    ones each span has of its own go before them."""
    name_bytes = name.encode()
    size = len(name_bytes)
    found = b"\x2a" + (_ONE_BYTE[size] if size < 128 else varint(size)) + name_bytes
    found += bytes((0x30, kind)) + attributes  # fields 5, 6, 9
    if error is not None:
        found += _field(b"\x7a", _field(b"\x12", error.encode()) + b"\x18\x02")  # field 15
    return found + (_FLAGS_REMOTE if remote_parent else _FLAGS_LOCAL)  # field 16


def span_field(  # noqa: PLR0917 (a call per span: positional arguments cost less)
    constant: bytes,
    trace_id: int,
    span_id: int,
    parent_id: int | None,
    start_ns: int,
    end_ns: int,
    more: bytes = b"",
) -> bytes:
    """A span as a field of its `ScopeSpans`: its ids and times, `more` of its attributes,
    then `constant` (`span_constant`)."""
    found = ids(0x0A10, trace_id >> 64, trace_id & _U64, 0x1208, span_id)  # fields 1, 2
    if parent_id is not None:
        found += _parent(0x2208, parent_id)  # field 4
    fixed = times(0x39, start_ns, 0x41, end_ns)  # fields 7, 8
    size = len(found) + TIMES_SIZE + len(more) + len(constant)
    return b"".join((head(size), found, fixed, more, constant))


def head(size: int) -> bytes:
    """A span's field head (ScopeSpans.spans, field 2): its tag and length."""
    if 128 <= size < 16384:
        return bytes((0x12, (size & 0x7F) | 0x80, size >> 7))
    return b"\x12" + varint(size)


def export_request(resource: bytes, scope: bytes, schema_url: str, spans: Sequence[bytes]) -> bytes:
    """An `ExportTraceServiceRequest` of one resource and one scope holding `spans` (from
    `span`): `resource` is the `Resource` message's bytes (its attributes,
    `AttributeWriter(b"\\x0a")`), `scope` the `InstrumentationScope`'s. The nested messages'
    lengths are added up first, so the spans' bytes are copied once, into the message."""
    scope_field = _field(b"\x0a", scope)
    schema_field = _field(b"\x1a", schema_url.encode())
    scope_spans = len(scope_field) + sum(map(len, spans)) + len(schema_field)
    resource_field = _field(b"\x0a", resource)
    scope_spans_head = b"\x12" + varint(scope_spans)
    resource_spans = len(resource_field) + len(scope_spans_head) + scope_spans
    return b"".join([b"\x0a", varint(resource_spans), resource_field, scope_spans_head,
                     scope_field, *spans, schema_field])  # fmt: skip
