"""The README's fenced code blocks, and how each is run by tests/e2e/test_readme.py.

An HTML comment on the line right above a fence (invisible when the README is rendered) says how
its block is run:

    <!-- readme-test: MODE [id=NAME] [files=a.csv,b.jsonl] [with=NAME] -->

MODE is one of:

    embedded  a sh / python block run against a real `levergate serve` on its embedded default
              (the local llama.cpp engine and the bundled model), where the README says `make run`
    sim       a sh / python block run against a real `levergate serve` in front of the simulator,
              with `batch`, `admin` and `request_log` on (the admin token in
              LEVERGATE_ADMIN__TOKEN)
    serve     a sh block that starts a server: run in the background until it answers a request
    config    a yaml block loaded as levergate's `Settings` (`with=NAME`: over that block first)
    make      `make -n` of the targets the block runs (they exist and resolve)
    layout    a listing of the source tree: every file and folder it names exists

A block with no comment runs by its language: sh and python as `sim`, yaml as `config`; any
other block must say. Ports are the README's: `8080` is the gateway the block talks to and
`8000` the upstream, rewritten to the servers the test started. `files=` writes the test's
fixtures of those names into the block's working directory first (`FIXTURES` in test_readme.py).
A block passes when it exits 0 with no traceback; curl commands in the README use
`--fail-with-body`, so an HTTP error fails the block too.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
MODES = frozenset({"embedded", "sim", "serve", "config", "make", "layout"})
BY_LANGUAGE = {"sh": "sim", "bash": "sim", "python": "sim", "yaml": "config"}
RUNS = {"embedded": {"sh", "bash", "python"}, "sim": {"sh", "bash", "python"},
        "serve": {"sh", "bash"}, "config": {"yaml"}, "make": {"sh"}, "layout": {""}}  # fmt: skip
OPTIONS = frozenset({"id", "files", "with"})
GATEWAY_PORT, UPSTREAM_PORT = "8080", "8000"
_MARKER = re.compile(r"^\s*<!--\s*readme-test:\s*(?P<spec>.*?)\s*-->\s*$")
_FENCE = re.compile(r"^(?P<indent>\s*)```(?P<lang>[\w+-]*)\s*$")


@dataclass(frozen=True)
class Block:
    line: int  # of the opening fence, 1-based
    lang: str
    text: str
    mode: str  # "" when neither a marker nor the language says
    options: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.options.get("id") or f"line{self.line}-{self.lang or 'text'}"

    @property
    def files(self) -> list[str]:
        return [f for f in self.options.get("files", "").split(",") if f]


def blocks(text: str | None = None) -> list[Block]:
    """Every fenced block of the README, with how it runs."""
    lines = (README.read_text(encoding="utf-8") if text is None else text).splitlines()
    found: list[Block] = []
    i = 0
    while i < len(lines):
        fence = _FENCE.match(lines[i])
        if fence is None:
            i += 1
            continue
        start, lang = i, fence["lang"]
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].strip() != "```":
            body.append(lines[i])
            i += 1
        i += 1
        mode, options = _spec(lines[start - 1] if start else "", lang)
        found.append(Block(start + 1, lang, "\n".join(body) + "\n", mode, options))
    return found


def _spec(above: str, lang: str) -> tuple[str, dict[str, str]]:
    marker = _MARKER.match(above)
    if marker is None:
        return BY_LANGUAGE.get(lang, ""), {}
    words = shlex.split(marker["spec"])
    options = dict(word.partition("=")[::2] for word in words[1:])
    return (words[0] if words else ""), options


def problems(block: Block, *, names: set[str], fixtures: set[str]) -> list[str]:
    """What is wrong with a block's marker (empty when it can run)."""
    where = f"README.md line {block.line}"
    if block.mode not in MODES:
        say = f"say how the ```{block.lang} block runs: <!-- readme-test: MODE --> above it"
        return [f"{where}: {say}, MODE one of {sorted(MODES)} (tests/e2e/readme_blocks.py)"]
    out = []
    if block.lang not in RUNS[block.mode]:
        out.append(f"{where}: mode {block.mode} does not run ```{block.lang} blocks")
    out += [f"{where}: unknown option {k!r}" for k in block.options if k not in OPTIONS]
    out += [f"{where}: no fixture file {f!r}" for f in block.files if f not in fixtures]
    if (base := block.options.get("with")) is not None and base not in names:
        out.append(f"{where}: with={base} names no block")
    return out


def localize(text: str, *, gateway: int, upstream: int | None = None) -> str:
    """The README's ports replaced by the servers the test started."""
    text = re.sub(rf"(?<![\w.]){GATEWAY_PORT}(?!\w)", str(gateway), text)
    if upstream is not None:
        text = re.sub(rf"(?<![\w.]){UPSTREAM_PORT}(?!\w)", str(upstream), text)
    return text


def make_targets(block: Block) -> list[str]:
    """The targets of the block's `make X` lines."""
    targets = []
    for line in block.text.splitlines():
        words = line.split("#", 1)[0].split()
        if words[:1] == ["make"]:
            targets += [w for w in words[1:] if "=" not in w]
    return targets


def layout_paths(block: Block) -> list[Path]:
    """The files and folders a layout listing names: at the left margin relative to the
    repository, indented two spaces relative to the folder above them."""
    paths: list[Path] = []
    parent = ROOT
    for line in block.text.splitlines():
        indent = len(line) - len(line.lstrip())
        head = re.split(r"\s{2,}", line.strip())[0].split()
        if indent not in (0, 2) or not head:
            continue
        if not all(re.fullmatch(r"[\w./-]+(/|\.py)", word) for word in head):
            continue
        base = ROOT if indent == 0 else parent
        paths.extend(base / word for word in head)
        if indent == 0 and head[0].endswith("/"):
            parent = ROOT / head[0]
    return paths
