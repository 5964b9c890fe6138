"""Configured secrets scrubbed from upstream *answers*: the success path, where levergate/redact.py
covers errors, headers and logs.

Why: an upstream (or a proxy before it, or a debug echo) that puts the gateway's own key into a
200 answer sent it to the client verbatim — whole and streamed, JSON-escaped (`\\u0073\\u006b…`),
and into every copy made of the answer (issue 20, item 9: 19 of 59 channels probed).

Where: at the bottom, in the HTTP upstream (upstreams/http.py, the Anthropic one through it),
before any layer sees the answer, so what is derived from it is clean too: the client's answer
and stream, the exact and semantic caches, a coalesced waiter's copy, the Responses store,
Messages translations, batch output files, async results and their webhook bodies. The secrets
are those the upstream is sent (its keys, URL credentials, credential headers): the only ones it
can echo. (Answers fetched from a provider's batch API are scrubbed where they are read,
batch/defer.py.)

Cost: none when the upstream has no secret (no scrubber is built). Otherwise an answer's bytes
are searched in C for each secret (`in`), and, only when they hold a JSON escape, by one regex
that matches any escaped spelling of any secret; the answer is parsed and re-encoded only when
one is found. A stream event gets the same search, and its text fields go through `Window`.

`Window`, the carry-over across events: a model echoes a key a few characters per event, so no
single event holds it. Per text field (a choice's `content`, its tool call's `arguments`, a
Responses `delta`...) the window keeps the last characters sent; a secret completed across
events is cut out of every event still held and replaced by `[redacted]` once. An event whose
text ends in `HOLD_FROM` or more characters that begin a secret is held back until the text
either completes the secret or stops matching it, so at most `HOLD_FROM - 1` characters of a
secret's beginning leave before the rest is caught.

What cannot be caught (README, "Secrets"): a secret transformed on the way (re-encoded other
than JSON escapes, URL-encoded, spaced, reversed, case-changed, translated); one split across
fields or choices rather than along one; one in a field of a streamed event that is not a text
field and split across events; a held-back window longer than `MAX_HELD` events (then flushed);
and secrets shorter than `SECRET_MIN_CHARS` or not in the configuration.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from levergate.core.json_bound import parse_json
from levergate.core.reply import Completed, Event, EventSource
from levergate.redact import REDACTED, Redactor

HOLD_FROM = 4
# Events held back at most, then sent as they are (an upstream sending empty events forever
# must not grow the window without bound).
MAX_HELD = 256
_SHORT = {'"': b'\\\\"', "\\": b"\\\\\\\\", "/": b"\\\\/", "\b": b"\\\\b", "\f": b"\\\\f",
          "\n": b"\\\\n", "\r": b"\\\\r", "\t": b"\\\\t"}  # fmt: skip
_TEXT_FIELDS = frozenset({"content", "reasoning_content", "reasoning", "refusal"})
Channel = tuple[Any, ...]
Loc = tuple[str | int, ...]
_CONTENT: Channel = ("content", 0)
_CONTENT_AT: Loc = ("choices", 0, "delta", "content")


def _escaped(secret: str) -> bytes:
    """A bytes regex for `secret` as it may appear inside a JSON string: each character
    literal, as `\\uXXXX` (either case of hex digits; surrogate pairs beyond the BMP), or as its
    short escape."""
    parts: list[bytes] = []
    for char in secret:
        spellings = [re.escape(char.encode())]
        units = char.encode("utf-16-be")
        escape = b"".join(b"\\\\u" + _hex(units[i : i + 2]) for i in range(0, len(units), 2))
        spellings.append(escape)
        if char in _SHORT:
            spellings.append(_SHORT[char])
        parts.append(b"(?:" + b"|".join(spellings) + b")")
    return b"".join(parts)


def _hex(unit: bytes) -> bytes:
    return b"".join(
        b"[%s%s]" % (d.encode(), d.upper().encode()) if d.isalpha() else d.encode()
        for d in unit.hex()
    )


class AnswerScrubber:
    __slots__ = ("_escaped", "_forms", "_plain", "_redact", "_trigger")

    def __init__(self, redactor: Redactor) -> None:
        self._redact = redactor
        self._forms = redactor.forms
        # One literal pattern per secret: the regex engine's literal scan measured ~3x faster
        # than `bytes.__contains__` on stream events here (and an alternation of several
        # literals ~8x slower than one).
        self._plain = tuple(re.compile(re.escape(form.encode())).search for form in self._forms)
        self._escaped = re.compile(b"|".join(_escaped(form) for form in redactor.forms)).search
        short = any(char in form for form in redactor.forms for char in _SHORT)
        # Without a character that has a short escape, a secret can only hide behind `\u`.
        self._trigger = re.compile(b"\\\\" if short else b"\\\\u").search

    @classmethod
    def of(cls, redactor: Redactor) -> AnswerScrubber | None:
        """None when there is no secret to look for: the answer path then does nothing."""
        return cls(redactor) if redactor.forms else None

    def holds_secret(self, raw: bytes) -> bool:
        for found in self._plain:
            if found(raw) is not None:
                return True
        if raw.find(b"\\") < 0:  # no escape at all (a one-byte search: memchr)
            return False
        return self._trigger(raw) is not None and self._escaped(raw) is not None

    def completed(self, reply: Completed) -> Completed:
        if not self.holds_secret(reply.raw):
            return reply
        return Completed(data=self._redact.scrub(reply.data), status=reply.status,
                         headers=reply.headers)  # fmt: skip

    def scrubbed(self, event: Event) -> Event:
        """`event` with every whole secret in it replaced (whether it holds one is for the
        caller to know: `holds_secret`)."""
        return Event.of(self._redact.scrub(event.json()))

    def window(self) -> Window:
        """The carry-over window for one stream: every event goes through its `feed`, in order,
        and `flush` at the stream's end. An upstream calls these in its own event loop (one
        generator level less per event than `stream`)."""
        return Window(self._forms, holds=self.holds_secret, scrub=self.scrubbed)

    async def stream(self, events: EventSource) -> EventSource:
        """`events` scrubbed, as a stream of its own."""
        window = self.window()
        try:
            async for event in events:
                for ready in window.feed(event):
                    yield ready
            for ready in window.flush():
                yield ready
        finally:
            await events.aclose()


@dataclass(slots=True)
class _Piece:
    """One text field of one event in the window, and the spans to cut out of it."""

    channel: Channel
    loc: Loc
    start: int  # the offset of its first character in its channel's text
    text: str
    cuts: list[tuple[int, int, bool]] = field(default_factory=list)  # (from, to, marked)

    @property
    def end(self) -> int:
        return self.start + len(self.text)

    def edited(self) -> str:
        out, at = [], 0
        for lo, hi, marked in sorted(self.cuts):
            out.append(self.text[at:lo] + (REDACTED if marked else ""))
            at = max(at, hi)
        out.append(self.text[at:])
        return "".join(out)


class Window:
    """The carry-over window of one stream (see the module docstring)."""

    def __init__(self, forms: Sequence[str], *, holds: Callable[[bytes], bool],
                 scrub: Callable[[Event], Event]) -> None:  # fmt: skip
        # Whole secrets in any field of one event: found in its bytes, replaced in its parse.
        self._holds = holds
        self._scrub = scrub
        self._forms = tuple(forms)
        # Neither a whole secret nor a held-back beginning can be where its head is not.
        self._heads = tuple(dict.fromkeys(form[:HOLD_FROM] for form in forms))
        self._enders = tuple({head[:n] for head in self._heads for n in range(1, len(head))})
        self._keep = max(map(len, forms)) - 1
        # The last characters sent of each channel whose end may begin a secret.
        self._tail: dict[Channel, str] = {}
        # Offsets in a channel, from the last time the window held anything back: only the
        # tail and the held pieces are ever compared, so a stale origin is as good as any.
        self._end: dict[Channel, int] = {}
        self._need: dict[Channel, int] = {}  # the offset from which a channel is held back
        self._held: list[tuple[Event, list[_Piece]]] = []

    def feed(self, event: Event) -> list[Event]:
        """The events that may leave now, in order (none while this one is held back)."""
        if self._holds(event.data):
            event = self._scrub(event)
        found = texts(event.json())
        if not self._held and self._clean(found):
            return [event]
        pieces = [_Piece(channel, loc, self._end.get(channel, 0), text)
                  for channel, loc, text in found]  # fmt: skip
        self._held.append((event, pieces))
        for piece in pieces:
            self._read(piece)
        return self._release(force=len(self._held) > MAX_HELD)

    def _clean(self, found: list[tuple[Channel, Loc, str]]) -> bool:
        """The common case, decided in C without building anything: no text of this event
        holds a secret's head together with what came before it; then it passes, and a channel
        keeps its last characters only while they end in the beginning of a head."""
        tails, heads = self._tail, self._heads
        if len(found) == 1:  # one text field: nearly every event
            channel, _, text = found[0]
            tail = tails.get(channel)
            both = text if tail is None else tail + text
            for head in heads:
                if head in both:
                    return False
            if both.endswith(self._enders):
                tails[channel] = both[-self._keep :]
            elif tail is not None:
                del tails[channel]
            return True
        seen = []
        for channel, _, text in found:
            tail = tails.get(channel)
            both = text if tail is None else tail + text
            for head in heads:
                if head in both:
                    return False
            seen.append(both)
        for (channel, _, _), both in zip(found, seen, strict=True):
            if both.endswith(self._enders):
                tails[channel] = both[-self._keep :]
            elif channel in tails:
                del tails[channel]
        return True

    def flush(self) -> list[Event]:
        return self._release(force=True)

    def _read(self, piece: _Piece) -> None:
        channel = piece.channel
        tail = self._tail.get(channel) or ""
        seen = tail + piece.text
        base = piece.start - len(tail)  # the channel offset of seen[0]
        after = 0
        for form in self._forms:  # a secret that began before this text and ends in it
            at = seen.find(form, after)
            if 0 <= at < len(tail):
                self._cut(channel, base + at, base + at + len(form))
                after = at + len(form)
        rest = seen[after:]
        begun = _begun(rest, self._forms)
        if begun >= HOLD_FROM:
            self._need[channel] = base + len(seen) - begun
        else:
            self._need.pop(channel, None)
        self._tail[channel] = rest[-self._keep :] if self._keep else ""
        self._end[channel] = piece.end

    def _cut(self, channel: Channel, lo: int, hi: int) -> None:
        """Cut channel span [lo, hi) out of every held piece it covers, marking the first."""
        marked = True
        for _, pieces in self._held:
            for piece in pieces:
                if piece.channel != channel:
                    continue
                a, b = max(lo, piece.start), min(hi, piece.end)
                if a < b:
                    piece.cuts.append((a - piece.start, b - piece.start, marked))
                    marked = False

    def _release(self, *, force: bool) -> list[Event]:
        out: list[Event] = []
        need = self._need
        if force:
            need.clear()
        while self._held:
            event, pieces = self._held[0]
            if not force and any(p.channel in need and p.end > need[p.channel] for p in pieces):
                break
            del self._held[0]
            out.append(_edited(event, pieces))
        return out


def _begun(text: str, forms: Sequence[str]) -> int:
    """The length of the longest end of `text` that begins a secret (0 below `HOLD_FROM`)."""
    best = 0
    size = len(text)
    for form in forms:
        head = form[:HOLD_FROM]
        at = text.find(head, max(0, size - len(form) + 1))
        while at != -1:
            if form.startswith(text[at:]):
                best = max(best, size - at)
                break
            at = text.find(head, at + 1)
    return best


def _edited(event: Event, pieces: list[_Piece]) -> Event:
    if not any(p.cuts for p in pieces):
        return event
    obj: Any = parse_json(event.data)  # a copy: the parsed event may be shared
    for piece in pieces:
        if piece.cuts:
            node = obj
            for step in piece.loc[:-1]:
                node = node[step]
            node[piece.loc[-1]] = piece.edited()
    return Event.of(obj)


def texts(obj: dict[str, Any]) -> list[tuple[Channel, Loc, str]]:
    """The text fields of a stream event that carry generated text across events: a chat or
    completions chunk's choices (content, reasoning, refusal, tool-call arguments, text) and a
    Responses event's `delta`. Each with the channel it continues and where it sits."""
    choices = obj.get("choices")
    if type(choices) is list and len(choices) == 1:  # the usual chunk: one choice's content
        choice = choices[0]
        delta = choice.get("delta") if type(choice) is dict else None
        if type(delta) is dict and len(delta) == 1 and "text" not in choice:
            content = delta.get("content")
            if type(content) is str and choice.get("index", 0) == 0 and "delta" not in obj:
                return [(_CONTENT, _CONTENT_AT, content)]
    found: list[tuple[Channel, Loc, str]] = []
    if type(choices) is list:
        for pos, choice in enumerate(choices):
            if type(choice) is dict:
                _choice(choice, pos, found)
    delta = obj.get("delta")
    if type(delta) is str:
        found.append((("delta", obj.get("output_index"), obj.get("content_index")), ("delta",),
                      delta))  # fmt: skip
    return found


def _choice(choice: dict[str, Any], pos: int, found: list[tuple[Channel, Loc, str]]) -> None:
    index = choice.get("index", pos)
    text = choice.get("text")
    if type(text) is str:
        found.append((("text", index), ("choices", pos, "text"), text))
    delta = choice.get("delta")
    if type(delta) is not dict:
        return
    for name, value in delta.items():
        if type(value) is str:
            if name in _TEXT_FIELDS:
                found.append(((name, index), ("choices", pos, "delta", name), value))
        elif name == "tool_calls" and type(value) is list:
            _calls(value, index, pos, found)


def _calls(calls: list[Any], index: Any, pos: int, found: list[tuple[Channel, Loc, str]]) -> None:
    for at, call in enumerate(calls):
        function = call.get("function") if type(call) is dict else None
        arguments = function.get("arguments") if type(function) is dict else None
        if type(arguments) is str:
            where = ("choices", pos, "delta", "tool_calls", at, "function", "arguments")
            found.append((("tool", index, call.get("index", at)), where, arguments))
