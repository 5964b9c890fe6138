"""The `LEVERGATE_*` environment as one layer of the settings: its values, which variable each
came from, and the variables that name no setting.

Precedence, highest first: values given explicitly (`levergate serve` flags, keyword arguments
of `Settings.load`), then the environment, then the YAML file, then the defaults. An operator
who types `--port 9001` means it, whatever a deployment's environment says; the environment
overrides what a file (often baked into an image) says.

`LEVERGATE_SERVER__PORT=9000` sets `server.port` (sections nested with `__`, names in any case);
a whole section or list can be given as JSON (`LEVERGATE_UPSTREAMS='[...]'`). A variable whose
first part names no section is ignored by the settings loader, so a typo there (`SERVR`) would
change nothing without a word: `unknown_variables` names them, and `Gateway` logs each at start
and `levergate config check` prints them. A typo deeper down (`SERVER__PROT`) is an error of
its section, which `Environment.variable_for` attributes to the variable.
"""

from __future__ import annotations

import difflib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic_settings import BaseSettings, EnvSettingsSource, SettingsError

from levergate.errors import ConfigError

PREFIX = "LEVERGATE_"
DELIMITER = "__"


@dataclass(frozen=True, slots=True)
class Environment:
    """The settings the environment gives (`values`, nested like the YAML file) and the
    variable behind each path (`names`: ("server", "port") -> "LEVERGATE_SERVER__PORT")."""

    values: dict[str, Any]
    names: Mapping[tuple[str, ...], str]

    @classmethod
    def read(
        cls, settings: type[BaseSettings], environ: Mapping[str, str] | None = None
    ) -> Environment:
        environ = os.environ if environ is None else environ
        try:
            values = EnvSettingsSource(settings)()
        except SettingsError as exc:
            # A section given as JSON that does not parse; pydantic-settings names the field.
            raise ConfigError(f"invalid {PREFIX}* environment variable: {exc}") from None
        return cls(values=values, names=_paths(environ))

    def variable_for(self, loc: Sequence[str | int], *, explicit: Mapping[str, Any]) -> str | None:
        """The variable the value at `loc` (a validation error's location) came from, or None
        when it came from elsewhere (the file, the defaults, an explicit value)."""
        parts = tuple(str(part).lower() for part in loc)
        for length in range(len(parts), 0, -1):
            name = self.names.get(parts[:length])
            if name is not None:
                return None if _holds(explicit, parts[:length]) else name
        return None


def unknown_variables(
    settings: type[BaseSettings], environ: Mapping[str, str] | None = None
) -> list[str]:
    """One line for each `LEVERGATE_*` variable whose first part names no settings section."""
    environ = os.environ if environ is None else environ
    sections = sorted(settings.model_fields)
    lines = []
    for path, name in sorted(_paths(environ).items(), key=lambda item: item[1]):
        if path[0] in settings.model_fields:
            continue
        close = difflib.get_close_matches(path[0], sections, n=1)
        hint = f" (did you mean {PREFIX}{close[0].upper()}?)" if close else ""
        lines.append(f"{name} names no setting: there is no section {path[0]!r}{hint}; ignored")
    return lines


def _paths(environ: Mapping[str, str]) -> dict[tuple[str, ...], str]:
    """Settings path -> variable name, for every `LEVERGATE_*` variable (any case, as the
    settings loader reads them)."""
    found = {}
    for name in environ:
        if len(name) > len(PREFIX) and name[: len(PREFIX)].upper() == PREFIX:
            found[tuple(name[len(PREFIX) :].lower().split(DELIMITER))] = name
    return found


def _holds(values: Mapping[str, Any], path: tuple[str, ...]) -> bool:
    node: Any = values
    for part in path:
        if not isinstance(node, Mapping) or part not in node:
            return False
        node = node[part]
    return True
