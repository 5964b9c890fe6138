"""Which of a provider's response headers reach the client: a documented allow-list.

Used by `OpenAIUpstream` (upstreams/http.py) on every answer, streamed or not, and on its
errors: the provider's rate-limit state (`x-ratelimit-*`), its waits and timings pass through so
a client's SDK or dashboard sees what it would see talking to the provider directly. Everything
else (cookies, server banners, hop-by-hop headers) stays behind; what passes is redacted
like every other text an upstream sends. The provider's `x-request-id`
is renamed `x-upstream-request-id`: levergate's own `x-request-id` names the call.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

RENAMED = {"x-request-id": "x-upstream-request-id", "request-id": "x-upstream-request-id"}


class HeaderAllowList:
    """Exact names and `prefix*` patterns, lower-case; built once per upstream."""

    __slots__ = ("_names", "_prefixes")

    def __init__(self, patterns: Iterable[str]) -> None:
        wanted = [p.strip().lower() for p in patterns if p.strip()]
        self._names = frozenset(p for p in wanted if not p.endswith("*"))
        self._prefixes = tuple(p[:-1] for p in wanted if p.endswith("*"))

    def __bool__(self) -> bool:
        return bool(self._names or self._prefixes)

    def pick(
        self, headers: Mapping[str, str], *, redact: Callable[[str], str] = str
    ) -> dict[str, str]:
        """The allowed headers of a response, lower-cased, the upstream's request id renamed,
        each value through `redact` (an upstream may echo the key it was sent in any of them)."""
        picked: dict[str, str] = {}
        if not self:
            return picked
        for name, value in headers.items():
            key = name.lower()
            if key in self._names or (self._prefixes and key.startswith(self._prefixes)):
                picked[RENAMED.get(key, key)] = redact(value)
        return picked
