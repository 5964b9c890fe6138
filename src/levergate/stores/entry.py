"""The byte format of a cache entry, shared by the exact, embeddings and semantic caches.

    magic "LGC1" | form u8 | created f64 | expires f64 | key tag 8B | n u32
    | n x (len u32, bytes): the meta blob, then the parts | crc32 u32 of everything before it

Why each part is there: the magic and version let a format change invalidate old entries
instead of misreading them; `created` / `expires` are wall-clock times written by the entry's
producer, so age and expiry are judged the same on every replica and after a restart, whatever
TTL the store itself enforces; the key tag binds the value to the key it was written under, so
an entry that lands under the wrong key (a store bug, a shared Redis written by something else)
is refused rather than served as the answer to another question; the CRC catches truncation and
bit rot. Any mismatch raises `CorruptEntry`, which the caches count and drop. `meta` is a small
blob the owning cache reads without touching the parts (the caches keep the answer's token
counts there, and the alias and upstream model that produced it, so a hit can count what it
saved, at that model's price, without parsing the answer: `layers/cache/entries.usage_meta`).
"""

from __future__ import annotations

import enum
import hashlib
import struct
import zlib
from dataclasses import dataclass

MAGIC = b"LGC1"
_HEAD = struct.Struct("<4sBdd8sI")
_LEN = struct.Struct("<I")
_CRC = struct.Struct("<I")


class Form(enum.IntEnum):
    COMPLETED = 1  # parts: [the whole response JSON]
    STREAM = 2  # parts: the data of each event, in order
    BLOB = 3  # parts: whatever the owning cache needs (one embedding, a semantic record)


_FORMS = {int(form): form for form in Form}


class CorruptEntry(ValueError):
    """The bytes are not an entry written for this key by this version."""


@dataclass(frozen=True, slots=True)
class Entry:
    form: Form
    parts: tuple[bytes, ...]
    created: float
    expires: float
    meta: bytes = b""

    def age(self, now: float) -> float:
        return max(0.0, now - self.created)

    def fresh(self, now: float) -> bool:
        return now < self.expires


def key_tag(key: str) -> bytes:
    return hashlib.blake2b(key.encode(), digest_size=8).digest()


def encode(entry: Entry, *, key: str) -> bytes:
    head = _HEAD.pack(
        MAGIC, int(entry.form), entry.created, entry.expires, key_tag(key), len(entry.parts) + 1
    )
    body = b"".join(_LEN.pack(len(part)) + part for part in (entry.meta, *entry.parts))
    data = head + body
    return data + _CRC.pack(zlib.crc32(data))


def decode(data: bytes, *, key: str) -> Entry:
    if len(data) < _HEAD.size + _CRC.size:
        raise CorruptEntry("too short")
    (crc,) = _CRC.unpack_from(data, len(data) - _CRC.size)
    if zlib.crc32(memoryview(data)[: -_CRC.size]) != crc:
        raise CorruptEntry("checksum mismatch")
    magic, form, created, expires, tag, count = _HEAD.unpack_from(data, 0)
    if magic != MAGIC:
        raise CorruptEntry("unknown format")
    if tag != key_tag(key):
        raise CorruptEntry("written under another key")
    kind = _FORMS.get(form)
    if kind is None:
        raise CorruptEntry(f"unknown form {form}")
    parts: list[bytes] = []
    offset = _HEAD.size
    end = len(data) - _CRC.size
    for _ in range(count):
        if offset + _LEN.size > end:
            raise CorruptEntry("truncated")
        (size,) = _LEN.unpack_from(data, offset)
        offset += _LEN.size
        if offset + size > end:
            raise CorruptEntry("truncated")
        parts.append(data[offset : offset + size])
        offset += size
    if offset != end:
        raise CorruptEntry("trailing bytes")
    if not parts:
        raise CorruptEntry("no meta")
    return Entry(kind, tuple(parts[1:]), created, expires, parts[0])
