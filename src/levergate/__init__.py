"""levergate: an LLM inference-optimization gateway — OpenAI-compatible proxy and library.

The public surface is this list; a test pins it. The names resolve on first use (PEP 562), so
`import levergate.cli.main` or `import levergate.version` does not load the gateway: the CLI's
`--help` and its light subcommands start without pydantic, the pipeline or the HTTP stacks.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from levergate.version import __version__ as __version__

if TYPE_CHECKING:
    from levergate.config import Settings
    from levergate.core.call import Call, Context, Trace
    from levergate.core.clock import Clock, SystemClock
    from levergate.core.controls import CachePolicy, Controls, Principal, Priority
    from levergate.core.reply import Completed, Event, Reply, Stream
    from levergate.core.service import Layer, Service, stack
    from levergate.errors import LevergateError
    from levergate.gateway import Gateway
    from levergate.layers.measure.record import RequestRecord, Sink
    from levergate.pipeline import Deps, build_pipeline

__all__ = [
    "CachePolicy",
    "Call",
    "Clock",
    "Completed",
    "Context",
    "Controls",
    "Deps",
    "Event",
    "Gateway",
    "Layer",
    "LevergateError",
    "Principal",
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

# Where each public name lives: the `TYPE_CHECKING` imports above, for the interpreter.
_HOME = {
    "Settings": "levergate.config",
    **dict.fromkeys(("Call", "Context", "Trace"), "levergate.core.call"),
    **dict.fromkeys(("Clock", "SystemClock"), "levergate.core.clock"),
    **dict.fromkeys(
        ("CachePolicy", "Controls", "Principal", "Priority"), "levergate.core.controls"
    ),
    **dict.fromkeys(("Completed", "Event", "Reply", "Stream"), "levergate.core.reply"),
    **dict.fromkeys(("Layer", "Service", "stack"), "levergate.core.service"),
    "LevergateError": "levergate.errors",
    "Gateway": "levergate.gateway",
    **dict.fromkeys(("RequestRecord", "Sink"), "levergate.layers.measure.record"),
    **dict.fromkeys(("Deps", "build_pipeline"), "levergate.pipeline"),
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'levergate' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # resolved once; later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
