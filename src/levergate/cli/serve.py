"""`levergate serve`: the gateway as an OpenAI-compatible proxy.

levergate serve --upstream http://127.0.0.1:8000/v1   # every model to one upstream
levergate serve --config levergate.yaml               # aliases, prices, auth... from a file
levergate serve                                       # the embedded default
levergate serve --config levergate.yaml --workers 2   # two processes on one port
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import logging
import sys
from typing import Any

from levergate.app import build_gateway
from levergate.cli.commands import SUMMARY
from levergate.config import DEFAULT_PORT, Settings
from levergate.logs import CLI_LOGGER
from levergate.logs import configure as configure_logging
from levergate.redact import mask_url
from levergate.server.run import serving


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser("serve", help=SUMMARY["serve"])
    parser.add_argument("--config", help="YAML settings file")
    parser.add_argument(
        "--upstream", help="proxy every model to this OpenAI-compatible base URL (…/v1)"
    )
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help=f"port to listen on (default {DEFAULT_PORT})")
    parser.add_argument(
        "--workers",
        type=int,
        help="worker processes serving the port as one gateway (default 1; server.workers)",
    )
    parser.set_defaults(func=run)


def settings_from(args: argparse.Namespace) -> Settings:
    given = (("host", args.host), ("port", args.port), ("workers", args.workers))
    server = {k: v for k, v in given if v is not None}
    values: dict[str, Any] = {"server": server} if server else {}
    if args.upstream:
        return Settings.for_upstream(args.upstream, args.config, **values)
    return Settings.load(args.config, **values)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    # Kept for as long as the server runs: the log filter holds the redactor weakly.
    redactor = configure_logging(settings)
    if settings.server.workers > 1:
        from levergate.server.workers import Supervisor, check_workers, cores

        check_workers(settings, available=cores())
        announce = functools.partial(_announce_workers, settings)
        load = functools.partial(settings_from, args)
        return Supervisor(settings, announce=announce, load=load).run()
    install_uvloop()
    asyncio.run(_serve(settings, args))
    del redactor
    return 0


async def _serve(settings: Settings, args: argparse.Namespace | None = None) -> None:
    if not settings.upstreams:
        from levergate.cli.embedded import serve_embedded

        await serve_embedded(settings)
        return
    gateway = build_gateway(settings)
    # SIGHUP and POST /admin/reload read the file again, with the same flags (server/reload.py).
    load = functools.partial(settings_from, args) if args is not None else None
    async with serving(gateway, process_wide=True, load=load) as url:
        _announce(settings, f"serving on {url} (upstreams: {_targets(settings)})")
        await asyncio.Event().wait()


def _targets(settings: Settings) -> str:
    return ", ".join(
        f"{u.name}={f'local:{u.model_path}' if u.kind == 'local' else mask_url(u.base_url)}"
        for u in settings.upstreams
    )


def _announce_workers(settings: Settings, url: str) -> None:
    _announce(
        settings,
        f"serving on {url} with {settings.server.workers} workers "
        f"(upstreams: {_targets(settings)})",
    )


def _announce(settings: Settings, text: str) -> None:
    """A line for the operator: printed as it is in text mode; in JSON mode an INFO record, so
    that every line of the log is JSON."""
    if settings.log_format == "json":
        logging.getLogger(CLI_LOGGER).info("%s", text)
    else:
        print(f"levergate: {text}", file=sys.stderr, flush=True)


def install_uvloop() -> None:
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
