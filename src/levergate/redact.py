"""Secrets never leave the process: `Redactor` replaces every configured secret in a text, and
`RedactingFilter` applies it to every log record of a levergate logger.

Why: a gateway holds every provider key, and an upstream (or a proxy in front of one) may echo
the request's `Authorization` header in an error body or a mid-stream error event. Copied as is,
the gateway's key reached clients and logs (issue 10, defect 2: a canary key appeared in 7
client responses and 5 log lines).

Where in the stack, four places, so no single call site can forget:
- at the bottom, `upstreams.http` scrubs what an upstream says (its error object, its stream's
  error events, a transport failure's text) of the secrets that upstream was given;
- at the top, `Gateway.serve` scrubs every error it hands to an edge of every configured secret;
- every record of a `levergate` logger goes through `RedactingFilter` (and `levergate serve`
  puts it on its log handler too, for other libraries' records), which also escapes control
  characters so an upstream's text cannot forge log lines;
- the start-up line prints base URLs through `mask_url`.

What counts as a secret (`Redactor.of`): every `SecretStr` in the settings tree (upstream keys,
client keys, any token a later section adds), keys read from the environment, the user and
password of any URL (`user:password@` in a `base_url` or a Redis URL, also percent-decoded and
as the Basic credential a client derives from them), and the values of configured headers whose
name says credential (`authorization`, `api-key`, `x-api-key`, ...).
"""

from __future__ import annotations

import base64
import logging
import re
import weakref
from collections.abc import Iterable, Iterator
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import BaseModel, SecretStr

from levergate.config import SECRET_MIN_CHARS, UpstreamSettings
from levergate.errors import LevergateError, UpstreamError

REDACTED = "[redacted]"
LOGGER = "levergate"

_CREDENTIAL_HEADER = re.compile(r"auth|key|token|secret|password|cookie", re.IGNORECASE)
# C0 and C1 controls, DEL and the Unicode line and paragraph separators: anything a terminal or
# a log shipper could take as the end of a line or an escape sequence.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029]")


class Redactor:
    """Replaces each of a fixed set of secrets with `[redacted]`. Immutable; one compiled
    alternation, so a text is scanned once however many secrets there are. Values shorter than
    `SECRET_MIN_CHARS` are not treated as secrets (see config/base.py)."""

    __slots__ = ("__weakref__", "_pattern", "forms")

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        forms = {form for secret in secrets for form in _forms(secret)}
        forms = {form for form in forms if len(form) >= SECRET_MIN_CHARS}
        ordered = sorted(forms, key=len, reverse=True)  # longest first: no partial leftovers
        # Every text that is replaced, as it would appear in a decoded string.
        self.forms: tuple[str, ...] = tuple(ordered)
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    @classmethod
    def of(cls, settings: BaseModel) -> Redactor:
        """Every secret configured anywhere in `settings` (a whole `Settings`, or one section)."""
        return cls(_secrets_in(settings))

    @classmethod
    def for_logs(cls, settings: BaseModel) -> Redactor:
        """`of(settings)` plus the query strings of configured URLs (a webhook receiver's
        `?token=`, which httpx logs with every request it makes): redacted in logs only, since
        a query such as `?api-version=2024-10-21` is no secret an answer should lose."""
        return cls([*_secrets_in(settings), *_url_queries(settings)])

    def __bool__(self) -> bool:
        return self._pattern is not None

    def __call__(self, text: str) -> str:
        if self._pattern is None or not text:
            return text
        return self._pattern.sub(REDACTED, text)

    def scrub(self, value: Any) -> Any:
        """`value` with every string inside it (keys and values of a JSON object) redacted."""
        if self._pattern is None:
            return value
        if isinstance(value, str):
            return self(value)
        if isinstance(value, dict):
            return {self.scrub(k): self.scrub(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.scrub(v) for v in value]
        return value

    def scrub_error(self, exc: LevergateError) -> LevergateError:
        """`exc` with its message (and an upstream's error object) redacted, in place."""
        if self._pattern is not None:
            exc.message = self(exc.message)
            exc.args = (exc.message,)
            exc.code, exc.param = self.scrub(exc.code), self.scrub(exc.param)
            if isinstance(exc, UpstreamError) and exc.provider_error is not None:
                exc.provider_error = self.scrub(exc.provider_error)
        return exc


def escape_controls(text: str) -> str:
    """Control characters and line breaks as visible escapes (`\\n`, `\\x1b`): what an upstream
    says stays on one log line."""
    if not _CONTROL.search(text):
        return text
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


def mask_url(url: str) -> str:
    """`url` with its `user:password@` part masked, for printing."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"***@{host}"))


def url_credentials(url: str) -> list[str]:
    """The user, password and `user:password` of a URL, as written and percent-decoded."""
    netloc = urlsplit(url).netloc
    if "@" not in netloc:
        return []
    userinfo = netloc.rpartition("@")[0]
    user, _, password = userinfo.partition(":")
    found = [userinfo, user, password]
    return [*found, *(unquote(value) for value in found)]


def _url_password(url: str) -> list[str]:
    """The password and `user:password` of a URL, as written and percent-decoded (none
    without a password)."""
    found = url_credentials(url)
    if len(found) < 3 or not found[2]:
        return []
    return [found[0], found[2], found[3], found[5]]


class RedactingFilter(logging.Filter):
    """Rewrites a record's message (and traceback text) with every active redactor applied and
    control characters escaped. One per logger, found again by type on later installs: logging
    is process-wide state, so this is too; redactors are held weakly and leave with the
    gateway that owned them."""

    def __init__(self) -> None:
        super().__init__()
        self._redactors: weakref.WeakSet[Redactor] = weakref.WeakSet()

    def add(self, redactor: Redactor) -> None:
        if redactor:
            self._redactors.add(redactor)

    def filter(self, record: logging.LogRecord) -> bool:
        message = escape_controls(self._apply(record.getMessage()))
        record.msg, record.args = message, None
        fields = getattr(record, "fields", None)  # structured fields (levergate/logs.py)
        if isinstance(fields, dict):
            record.fields = {
                k: escape_controls(self._apply(v)) if isinstance(v, str) else v
                for k, v in fields.items()
            }
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = self._apply(record.exc_text)
        return True

    def _apply(self, text: str) -> str:
        for redactor in list(self._redactors):
            text = redactor(text)
        return text


def install(redactor: Redactor, *, handler: logging.Handler | None = None) -> None:
    """Scrub every record of the `levergate` loggers (existing ones: each module makes its
    logger at import, before a gateway is built) and, if given, every record through `handler`
    (`levergate serve`'s stderr handler, which other libraries' loggers reach too)."""
    targets: list[logging.Filterer] = [logging.getLogger(name) for name in _levergate_loggers()]
    if handler is not None:
        targets.append(handler)
    for target in targets:
        existing = [f for f in target.filters if isinstance(f, RedactingFilter)]
        active = existing[0] if existing else RedactingFilter()
        if not existing:
            target.addFilter(active)
        active.add(redactor)


def _levergate_loggers() -> Iterator[str]:
    yield LOGGER
    # The HTTP client the gateway's own exchanges (webhooks, provider batch APIs) go through
    # logs every request's URL at INFO.
    yield "httpx"
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if name.startswith(LOGGER + ".") and isinstance(logger, logging.Logger):
            yield name


def _url_queries(value: Any) -> Iterator[str]:
    """The query string, and each parameter's value, of every URL in `value`."""
    if isinstance(value, str):
        if "://" in value and "?" in value:
            query = urlsplit(value).query
            yield query
            for pair in query.split("&"):
                yield pair.partition("=")[2]
                yield unquote(pair.partition("=")[2])
    elif isinstance(value, BaseModel):
        for name in type(value).model_fields:
            yield from _url_queries(getattr(value, name))
    elif isinstance(value, dict):
        for item in value.values():
            yield from _url_queries(item)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from _url_queries(item)


def _forms(secret: str) -> list[str]:
    """A secret as it may appear in an echo: as is, and a `user:password` pair as the Basic
    credential HTTP clients send for URL credentials."""
    forms = [secret]
    if ":" in secret:
        forms.append(base64.b64encode(secret.encode()).decode("ascii"))
    return forms


def _secrets_in(value: Any) -> Iterator[str]:
    if isinstance(value, SecretStr):
        yield value.get_secret_value()
        # A secret URL (`stores.<name>.redis_url`, `postgres_dsn`): its password alone too (its
        # user alone is no secret: `postgres@` would redact every "postgres" in the logs).
        yield from _url_password(value.get_secret_value())
    elif isinstance(value, str):
        if "://" in value and "@" in value:
            yield from url_credentials(value)
    elif isinstance(value, BaseModel):
        if isinstance(value, UpstreamSettings):
            # Keys named by `api_keys_env` are read from the environment, not held as fields.
            yield from (k.get_secret_value() for k in value.all_keys() if k is not None)
        for name in type(value).model_fields:
            yield from _secrets_in(getattr(value, name))
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and isinstance(item, str) and _CREDENTIAL_HEADER.search(key):
                yield item
                yield item.partition(" ")[2]  # the token of "Bearer <token>"
            else:
                yield from _secrets_in(item)
    elif isinstance(value, list | tuple | set | frozenset):
        for item in value:
            yield from _secrets_in(item)
