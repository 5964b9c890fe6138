"""Trim, the per-model lever that fits a chat request to its model's window (layer.py)."""

from levergate.layers.trim.layer import Trim
from levergate.layers.trim.summary import Deferred

__all__ = ["Deferred", "Trim"]
