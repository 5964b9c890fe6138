"""Split a whole among parts in proportion to weights, in whole units, adding up exactly.

The micro-batch layer bills each request its share of the batch's `prompt_tokens`: shares must
be integers and sum to what the provider billed, or the ledger over-/under-counts. Largest
remainder (Hamilton's method): floor every exact share, then hand the units left to the largest
fractional parts, earlier parts first on a tie. Each share is then within 1 of its exact value.
With no weight at all the whole is split evenly.
"""

from __future__ import annotations

from collections.abc import Sequence


def prorate(total: int, weights: Sequence[int]) -> list[int]:
    if total < 0 or any(w < 0 for w in weights):
        raise ValueError("prorate takes a non-negative total and weights")
    if not weights:
        return []
    if sum(weights) == 0:
        weights = [1] * len(weights)
    whole = sum(weights)
    shares = [total * w // whole for w in weights]
    remainders = [total * w % whole for w in weights]
    left = total - sum(shares)
    order = sorted(range(len(weights)), key=lambda i: (-remainders[i], i))
    for i in order[:left]:
        shares[i] += 1
    return shares
