"""Service tiers: the tier each request is sent at (layer.py) and what was seen of each model's
tiers (book.py); the policy itself is pure (policies/tiers.py)."""

from levergate.layers.tiers.book import TierBook
from levergate.layers.tiers.layer import Tiers, is_refusal

__all__ = ["TierBook", "Tiers", "is_refusal"]
