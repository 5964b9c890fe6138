"""`levergate serve`: the gateway as an OpenAI-compatible proxy.

levergate serve --upstream http://127.0.0.1:8000/v1   # every model to one upstream
levergate serve --config levergate.yaml               # aliases, prices, auth... from a file
levergate serve                                       # the embedded default
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from typing import Any

from levergate.config import DEFAULT_PORT, Settings
from levergate.gateway import Gateway
from levergate.redact import Redactor, mask_url
from levergate.redact import install as install_redaction
from levergate.server.run import serving


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "serve", help="run the gateway as an OpenAI-compatible HTTP proxy"
    )
    parser.add_argument("--config", help="YAML settings file")
    parser.add_argument(
        "--upstream", help="proxy every model to this OpenAI-compatible base URL (…/v1)"
    )
    parser.add_argument("--host", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", type=int, help=f"port to listen on (default {DEFAULT_PORT})")
    parser.set_defaults(func=run)


def settings_from(args: argparse.Namespace) -> Settings:
    server = {k: v for k, v in (("host", args.host), ("port", args.port)) if v is not None}
    values: dict[str, Any] = {"server": server} if server else {}
    if args.upstream:
        return Settings.for_upstream(args.upstream, args.config, **values)
    return Settings.load(args.config, **values)


def run(args: argparse.Namespace) -> int:
    settings = settings_from(args)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    # On the handler as well as on levergate's loggers: other libraries' records (asyncio,
    # aiohttp) may carry an upstream's text too. The filter holds redactors weakly: this
    # frame keeps this one alive for as long as the server runs.
    redactor = Redactor.of(settings)
    install_redaction(redactor, handler=handler)
    logging.basicConfig(level=settings.log_level.upper(), handlers=[handler])
    _install_uvloop()
    asyncio.run(_serve(settings))
    return 0


async def _serve(settings: Settings) -> None:
    if not settings.upstreams:
        from levergate.cli.embedded import serve_embedded

        await serve_embedded(settings)
        return
    gateway = Gateway(settings)
    async with serving(gateway, process_wide=True) as url:
        targets = ", ".join(
            f"{u.name}={f'local:{u.model_path}' if u.kind == 'local' else mask_url(u.base_url)}"
            for u in settings.upstreams
        )
        print(f"levergate: serving on {url} (upstreams: {targets})", file=sys.stderr, flush=True)
        await asyncio.Event().wait()


def _install_uvloop() -> None:
    try:
        import uvloop

        asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    except ImportError:
        pass
