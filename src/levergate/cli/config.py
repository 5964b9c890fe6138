"""`levergate config check | schema | reference`: the settings tree from the command line.

levergate config check levergate.yaml      # validate file + environment, print it resolved
levergate config schema > levergate.schema.json
levergate config reference -o docs/configuration.md

`check` loads the file the way `levergate serve --config FILE` does (the `LEVERGATE_*`
environment over it, the same errors naming the field and the variable), requires every key
variable the file names (as the gateway does at start), warns about `LEVERGATE_*` variables that
name no setting, and prints the resolved configuration as YAML with every secret redacted
(`SecretStr` fields, URL credentials, credential headers). It reads no model file and opens no
store: what the pipeline checks when it is built (a router file, a tokenizer) is still found at
start.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from levergate.cli.commands import SUMMARY
from levergate.cli.output import add_json_flag, print_json
from levergate.config import Settings
from levergate.config.environment import unknown_variables
from levergate.redact import Redactor
from levergate.stores.select import deprecations


def register(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser("config", help=SUMMARY["config"])
    commands = parser.add_subparsers(dest="config_command", required=True)
    check = commands.add_parser(
        "check", help="validate a file and the LEVERGATE_* environment; print it resolved"
    )
    check.add_argument("file", nargs="?", help="YAML settings file (none: the environment alone)")
    check.add_argument("--upstream", help="as `levergate serve --upstream URL`")
    add_json_flag(check, "the resolved settings (instead of YAML)")
    check.set_defaults(func=run_check)
    schema = commands.add_parser("schema", help="print the settings' JSON Schema")
    schema.set_defaults(func=run_schema)
    reference = commands.add_parser("reference", help="print the configuration reference")
    reference.add_argument("-o", "--output", help="write it to this file instead")
    reference.set_defaults(func=run_reference)


def run_check(args: argparse.Namespace) -> int:
    if args.upstream:
        settings = Settings.for_upstream(args.upstream, args.file)
    else:
        settings = Settings.load(args.file)
    settings.require_variables()
    for line in [*unknown_variables(Settings), *deprecations(settings)]:
        print(f"levergate: warning: {line}", file=sys.stderr)
    resolved = Redactor.of(settings).scrub(settings.model_dump(mode="json"))
    if args.as_json:
        print_json(resolved)
    else:
        sys.stdout.write(yaml.safe_dump(resolved, sort_keys=False, allow_unicode=True))
    where = args.file or "the environment"
    print(f"levergate: {where}: the configuration is valid", file=sys.stderr)
    return 0


def run_schema(args: argparse.Namespace) -> int:
    del args
    from levergate.config.reference import schema

    sys.stdout.write(json.dumps(schema(), indent=2) + "\n")
    return 0


def run_reference(args: argparse.Namespace) -> int:
    from levergate.config.reference import render

    text = render()
    if args.output:
        Path(args.output).write_text(text, encoding="utf-8")
    else:
        sys.stdout.write(text)
    return 0
