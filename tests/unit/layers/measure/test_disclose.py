"""The model name a client sent (behind `*`) becomes a header value that is safe whatever it
holds: visible ASCII as it is, anything else percent-encoded, an overlong one left out."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from levergate.config.server import ResponseHeadersSettings
from levergate.core.call import CacheOutcome, CacheResult, Call, Context
from levergate.core.reply import Completed
from levergate.layers.measure.disclose import COST_HEADER, MAX_NAME_CHARS, Disclose, header_value
from levergate.policies.pricing import Bill, Lever


@given(st.text(max_size=300))
def test_any_name_becomes_a_value_a_header_can_carry(name: str) -> None:
    value = header_value(name)
    if value is None:
        assert len(name) > MAX_NAME_CHARS
        return
    assert value.isascii()
    assert value.isprintable()
    assert value == name or "%" in value


def test_configured_aliases_pass_as_they_are_and_hostile_names_are_encoded() -> None:
    assert header_value("org/model-7b:q4_k_m") == "org/model-7b:q4_k_m"
    assert header_value("gpt\r\nx-evil: 1") == "gpt%0D%0Ax-evil:%201"
    assert header_value("\u0000\u202e\ud7ff\U0001f600") == "%00%E2%80%AE%ED%9F%BF%F0%9F%98%80"
    assert header_value("\ud800") == "%5Cud800"  # a lone surrogate, as JSON can carry it
    assert header_value("m" * (MAX_NAME_CHARS + 1)) is None


_BILLS = st.builds(
    Bill,
    st.floats(0, 10),
    st.floats(0, 10),
    st.just(()),
    st.dictionaries(st.sampled_from(list(Lever)), st.floats(-5, 5), max_size=3),
)
_OUTCOMES = st.sampled_from([None, CacheOutcome.HIT, CacheOutcome.MISS, CacheOutcome.COALESCED])


@settings(max_examples=200)
@given(
    bills=st.lists(_BILLS, min_size=1, max_size=3),
    served=st.lists(st.tuples(st.integers(0, 2), _OUTCOMES, st.booleans()), min_size=1,
                    max_size=12),
)  # fmt: skip
def test_the_cost_headers_of_a_served_answer_are_those_written_afresh(
    bills: list[Bill], served: list[tuple[int, CacheOutcome | None, bool]]
) -> None:
    """`Disclose` keeps a served answer's cost and savings texts by its bill (one per cache
    entry): whatever the order, and for an equal bill that is another object, the headers are
    those a fresh `Disclose` writes."""
    disclose = Disclose(ResponseHeadersSettings())
    for at, outcome, twin in served:
        bill = bills[at % len(bills)]
        bill = Bill(*bill) if twin else bill
        call = Call("chat", {"model": "m"}, Context("r"))
        call.ctx.trace.cache = None if outcome is None else CacheResult("exact", outcome)
        call.ctx.trace.budget_left = 5.0
        reply, fresh = Completed(b"{}"), Completed(b"{}")
        disclose.write(call, reply, bill)
        Disclose(ResponseHeadersSettings()).write(call, fresh, bill)
        assert reply.headers == fresh.headers
        assert reply.headers[COST_HEADER] == f"{bill.cost_usd:.8f}"
