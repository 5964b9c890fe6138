"""What the packaging tests read: the repository's deployment files, parsed.

`instructions` reads a Dockerfile the way the builder does (comments dropped, `\\` lines
joined, `# hadolint` directives kept out), so a test can ask what each stage copies and runs.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "deploy" / "compose"
CHART = ROOT / "charts" / "levergate"
DASHBOARD = ROOT / "deploy" / "grafana" / "levergate.json"
LOCKS = ROOT / "requirements"


@dataclass(frozen=True)
class Instruction:
    stage: str  # the `AS` name of the stage it belongs to ("" before the first FROM)
    keyword: str  # upper case
    args: str

    def exec_form(self) -> list[str]:
        """A JSON-array argument (`["a", "b"]`) as a list."""
        parsed = orjson.loads(self.args)
        assert isinstance(parsed, list), self.args
        return [str(word) for word in parsed]


def instructions(path: Path = DOCKERFILE) -> list[Instruction]:
    joined: list[str] = []
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        pending = f"{pending} {line[:-1].strip()}" if line.endswith("\\") else f"{pending} {line}"
        if not line.endswith("\\"):
            joined.append(pending.strip())
            pending = ""
    out: list[Instruction] = []
    stage = ""
    for line in joined:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            match = re.search(r"\bAS\s+(\S+)$", args, flags=re.IGNORECASE)
            stage = match[1] if match else args
        out.append(Instruction(stage, keyword, args.strip()))
    return out


def copy_sources(instruction: Instruction) -> list[str]:
    """The build-context paths a COPY names (none for `COPY --from=stage`)."""
    words = shlex.split(instruction.args)
    if any(word.startswith("--from") for word in words):
        return []
    return [word for word in words[:-1] if not word.startswith("--")]


def pyproject() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


@dataclass
class Pin:
    name: str
    versions: set[Version] = field(default_factory=set)
    hashes: int = 0
    via: set[str] = field(default_factory=set)


def parse(path: Path) -> tuple[list[str], dict[str, Pin]]:
    """The header's comment lines and the pins by canonical name (a package pinned twice
    under different markers keeps both versions)."""
    header: list[str] = []
    pins: dict[str, Pin] = {}
    current: Pin | None = None
    in_via = False
    for line in path.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not line.startswith(" ") and stripped.startswith("#"):
            header.append(stripped)
            continue
        if match := re.match(r"^([A-Za-z0-9._-]+)==([^\s;\\]+)", line):
            name = canonicalize_name(match[1])
            current = pins.setdefault(name, Pin(name))
            current.versions.add(Version(match[2]))
            in_via = False
        elif current is not None and stripped.startswith("--hash=sha256:"):
            current.hashes += 1
        elif current is not None and stripped.startswith("# via"):
            rest = stripped.removeprefix("# via").strip()
            in_via = not rest
            if rest:
                current.via.add(rest)
        elif current is not None and in_via and stripped.startswith("#   "):
            current.via.add(stripped.removeprefix("#   ").strip())
    return header, pins


def make_rule(target: str) -> tuple[list[str], list[str]]:
    """A Makefile rule, variables as written: its prerequisites (order-only ones included) and its
    recipe's commands (continuation lines joined)."""
    text = (ROOT / "Makefile").read_text(encoding="utf-8").replace("\\\n", " ")
    match = re.search(rf"^{re.escape(target)}:(.*)\n((?:\t.*\n)*)", text, flags=re.MULTILINE)
    assert match, f"the Makefile has no rule for {target}"
    prerequisites = [word for word in match[1].split() if word != "|"]
    return prerequisites, [line.strip() for line in match[2].splitlines()]
