"""levergate: an LLM inference-optimization gateway — OpenAI-compatible proxy and library.

The public surface is this list; a test pins it.
"""

from levergate.config import Settings
from levergate.core.call import Call, Context, Priority, Trace
from levergate.core.clock import Clock, SystemClock
from levergate.core.reply import Completed, Event, Reply, Stream
from levergate.core.service import Layer, Service, stack
from levergate.errors import LevergateError
from levergate.gateway import Gateway
from levergate.layers.measure.record import RequestRecord, Sink
from levergate.pipeline import Deps, build_pipeline

__all__ = [
    "Call",
    "Clock",
    "Completed",
    "Context",
    "Deps",
    "Event",
    "Gateway",
    "Layer",
    "LevergateError",
    "Priority",
    "Reply",
    "RequestRecord",
    "Service",
    "Settings",
    "Sink",
    "Stream",
    "SystemClock",
    "Trace",
    "build_pipeline",
    "stack",
]

__version__ = "0.1.0"
