"""Build the user guide and API reference (HTML, with search) from the docstrings: mkdocs with
mkdocstrings' Python handler, as `mkdocs.yml` lays it out.

    python scripts/api_docs.py --out build/docs

Strict: any warning fails the build — a reference (`[Gateway.map][levergate.gateway.Gateway.map]`)
that does not resolve, a docstring griffe cannot parse, a page missing from the navigation, a
link to a page that does not exist — so tests/unit/test_api_docs.py keeps the site honest. No
network: the bundled `mkdocs` theme, and the reference is read from `src/` by griffe.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


class _Warnings(logging.Handler):
    """Every warning mkdocs and its plugins log during the build."""

    def __init__(self) -> None:
        super().__init__(level=logging.WARNING)
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(f"{record.name}: {record.getMessage()}")


def build(out: Path, config: Path = ROOT / "mkdocs.yml") -> list[str]:
    """Render the site `config` lays out into `out`; the warnings logged meanwhile (empty
    when clean)."""
    from mkdocs.commands.build import build as mkdocs_build
    from mkdocs.config import load_config
    from mkdocs.exceptions import Abort

    caught = _Warnings()
    logger = logging.getLogger("mkdocs")
    logger.addHandler(caught)
    try:
        loaded = load_config(str(config), site_dir=str(out.resolve()), strict=True)
        mkdocs_build(loaded)
    except Abort as stopped:  # strict mode stops at the end of a build that warned
        return caught.seen or [str(stopped)]
    finally:
        logger.removeHandler(caught)
    return caught.seen


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=ROOT / "build" / "docs")
    parser.add_argument("--config", type=Path, default=ROOT / "mkdocs.yml")
    args = parser.parse_args()
    problems = build(args.out, args.config)
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
