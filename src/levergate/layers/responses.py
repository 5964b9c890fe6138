"""ResponsesBridge: `/v1/responses` calls, passed through natively or translated to chat.

Sits in FRONT right under Authenticate: the tenant is known (a response belongs to the tenant
that made it, and `previous_response_id` is looked up in that tenant's responses only), and
everything below sees the call it will really send — Admission, the caches, Fallback and every
per-model and per-endpoint layer apply to a translated Responses request exactly as to the chat
call it became (its expanded conversation included), and to a native one as a `response` call.

Which way a call goes is the alias's: `native` when every upstream behind it says
`responses: native` (config/upstreams.py), else `translate`.

- native: the body goes unchanged to `{base_url}/responses`; the upstream keeps the
  conversation. Levergate keeps a copy of each stored response (who owns it, what it said),
  so another tenant's id is a 404 here before anything is sent, and `GET` works on both paths.
- translate: `protocol.responses.request.to_chat` (earlier turns read back from the store), the chat
  answer turned back (`protocol.responses.answer`, or `EventWriter` for a stream), and the turn
  (its input and response, and the ids of the turns before it: stores/responses.py) stored
  when it completed cleanly — a stream's in its close path, never a failed or cut one.
  `store: false` keeps nothing, so a later turn naming it is a 404.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from levergate.config import WILDCARD, ModelSettings, ResponsesSettings, Settings
from levergate.core.call import Call
from levergate.core.reply import Completed, Event, EventSource, Reply
from levergate.core.service import Answer, Layer, Service
from levergate.errors import BadRequest, LevergateError, NotFound
from levergate.protocol.responses.answer import new_id, response_from_chat
from levergate.protocol.responses.request import check, input_items, to_chat
from levergate.protocol.responses.stream import EventWriter
from levergate.stores.responses import ResponseStore, StoredResponse

if TYPE_CHECKING:
    from levergate.layers.shared import Shared

log = logging.getLogger("levergate.responses")
# The response a request continues: its id and its stored turn.
Previous = tuple[str, StoredResponse]

_FINAL = frozenset({"response.completed", "response.incomplete"})


class ResponsesBridge:
    @classmethod
    def layer(
        cls, settings: Settings, *, models: Mapping[str, ModelSettings], shared: Shared
    ) -> Layer:
        """Always present: it costs one comparison for every call that is not a response."""
        native = frozenset(u.name for u in settings.upstreams
                           if getattr(u, "responses", "translate") == "native")  # fmt: skip
        return partial(cls, settings=settings.responses, store=shared.responses,
                       native=partial(_serves_natively, native, models))  # fmt: skip

    def __init__(
        self,
        inner: Service,
        *,
        settings: ResponsesSettings,
        store: ResponseStore,
        native: Callable[[str], bool],
    ) -> None:
        self._inner = inner
        self._settings = settings
        self._store = store
        self._native = native

    def __call__(self, call: Call) -> Answer:
        if call.kind != "response":
            return self._inner(call)
        return self._bridged(call)

    async def _bridged(self, call: Call) -> Reply:
        body = call.body
        check(body, settings=self._settings)
        input_items(body["input"])  # every item an object, before anything is spent on it
        previous = await self._previous(call)
        native = self._native(call.model)
        if previous is not None and previous[1].native != native:
            how = "natively by" if previous[1].native else "by translation to chat completions for"
            raise BadRequest(
                f"Previous response '{body['previous_response_id']}' was served {how} another "
                f"upstream; continue it with a model served the same way.",
                param="previous_response_id",
            )
        if native:
            return await self._passed(call)
        return await self._translated(call, previous)

    async def _previous(self, call: Call) -> Previous | None:
        wanted = call.body.get("previous_response_id")
        if not isinstance(wanted, str):
            return None
        found = await self._store.load(wanted, tenant=call.ctx.principal.tenant)
        if found is None:
            raise NotFound(
                f"Previous response with id '{wanted}' not found.",
                param="previous_response_id",
                code="previous_response_not_found",
            )
        return wanted, found

    # ---- native ---------------------------------------------------------------------------

    async def _passed(self, call: Call) -> Reply:
        reply = await self._inner(call)
        keep = call.body.get("store") is not False
        if isinstance(reply, Completed):
            if keep and reply.status == 200:
                await self._keep(call, reply.data, previous=None, native=True)
            return reply
        if not keep:
            return reply
        return reply.through(partial(self._keep_final, call))

    async def _keep_final(self, call: Call, events: EventSource) -> EventSource:
        final: dict[str, Any] | None = None
        async for event in events:
            yield event
            data = event.json()
            if data.get("type") in _FINAL and isinstance(data.get("response"), dict):
                final = data["response"]
        if final is not None:
            await self._keep_quietly(call, final, previous=None, native=True)

    # ---- translated -----------------------------------------------------------------------

    async def _translated(self, call: Call, previous: Previous | None) -> Reply:
        body = call.body
        items = input_items(body["input"])
        turns, total = 1, len(items)
        if previous is not None:
            turns, total = previous[1].depth + 1, previous[1].items + len(items)
        limit = self._settings.max_conversation_items
        if total > limit or turns > limit:
            raise BadRequest(
                f"The conversation has {total} items in {turns} turns, more than the limit of "
                f"{limit}.",
                param="previous_response_id",
                code="conversation_too_long",
            )
        history = []
        if previous is not None:
            history = await self._store.conversation(previous[1], tenant=call.ctx.principal.tenant)
        chat = dataclasses.replace(call, kind="chat", body=to_chat(body, history=history), raw=None)
        response_id = new_id("resp")
        reply = await self._inner(chat)
        keep = body.get("store") is not False
        if isinstance(reply, Completed):
            if reply.status != 200:
                return reply
            response = response_from_chat(body, reply.data, response_id=response_id)
            if keep:
                await self._keep(call, response, previous=previous, native=False)
            return Completed(data=response, headers=reply.headers)
        writer = EventWriter(body, response_id=response_id, model=call.model)
        return reply.through(partial(self._written, call, writer, keep, previous))

    async def _written(
        self,
        call: Call,
        writer: EventWriter,
        keep: bool,
        previous: Previous | None,
        events: EventSource,
    ) -> EventSource:
        opened = False
        try:
            async for event in events:
                chunk = event.json()
                if not opened:
                    if isinstance(model := chunk.get("model"), str) and model:
                        writer.response["model"] = model
                    for opening in writer.open():
                        yield Event.of(opening)
                    opened = True
                for out in writer.feed(chunk):
                    yield Event.of(out)
            if not opened:
                for opening in writer.open():
                    yield Event.of(opening)
            for out in writer.close():
                yield Event.of(out)
        except LevergateError as exc:
            if opened:
                for out in writer.fail(code=exc.code or exc.type, message=exc.message):
                    yield Event.of(out)
            raise
        if keep:
            await self._keep_quietly(call, writer.response, previous=previous, native=False)

    # ---- the store ------------------------------------------------------------------------

    async def _keep(
        self, call: Call, response: dict[str, Any], *, previous: Previous | None, native: bool
    ) -> None:
        """Store this turn once: its input and response, and the ids of the turns before it
        (stores/responses.py), never a copy of the conversation."""
        response_id = response.get("id")
        if not isinstance(response_id, str) or not response_id:
            return
        items = input_items(call.body["input"])
        tenant = call.ctx.principal.tenant
        record = (
            StoredResponse(tenant, response, items, native=True)
            if native
            else StoredResponse.turn(tenant=tenant, response=response, input=items,
                                     previous=previous)
        )  # fmt: skip
        if not await self._store.save(response_id, record):
            log.warning("response %s is over responses.max_stored_bytes or the tenant's "
                        "responses.store.tenant_bytes: not kept", response_id)  # fmt: skip

    async def _keep_quietly(
        self, call: Call, response: dict[str, Any], *, previous: Previous | None, native: bool
    ) -> None:
        """After a stream: the client has its answer, so a store failure is logged, not raised."""
        try:
            await self._keep(call, response, previous=previous, native=native)
        except LevergateError as exc:
            log.warning("response %s not kept: %s", response.get("id"), exc.message)


def _serves_natively(
    native: frozenset[str], models: Mapping[str, ModelSettings], alias: str
) -> bool:
    """An alias's Responses calls pass through natively only when every upstream behind it
    serves `/v1/responses` (`responses: native`); otherwise they are translated to chat."""
    model = models.get(alias) or models.get(WILDCARD)
    return model is not None and all(t.upstream in native for t in model.endpoints)
