"""The documentation site's reference pages, generated from the code so they cannot drift from it.

`docs/gen_reference.py` (run by mkdocs-gen-files at `mkdocs build`) writes each function's markdown to a
page; the pages are never committed. Descriptions come from where the code already keeps them: a
pydantic field's `description`, else the comment on or above the field (wap.toml keys, check
parameters), Click's help (CLI), errors.py's docstring and constants (exit codes).
"""

from __future__ import annotations

import inspect
import re
import types
from collections.abc import Iterator
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from pydantic import BaseModel, SecretStr
from pydantic.fields import FieldInfo

from wapflow.errors import WapError

# --- shared: comments next to definitions, types and defaults as TOML ------------------------------

_DEF = re.compile(r"^(?P<name>[A-Za-z_]\w*)\s*(?::[^=]*)?(?:=.*)?$")


def source_comments(obj: type | types.ModuleType, above: bool = True) -> dict[str, str]:
    """name -> the comment above it (a block of `#` lines; `above=False`: not those) or after it on its
    line, for the definitions directly in a class body or a module (where wapflow documents a wap.toml
    key or a constant)."""
    lines = inspect.getsource(obj).splitlines()
    indent = ""
    if not isinstance(obj, types.ModuleType):
        first = next(line for line in lines[1:] if line.strip())
        indent = first[: len(first) - len(first.lstrip())]
    found: dict[str, str] = {}
    pending: list[str] = []
    for line in lines:
        text = line[len(indent) :]
        if not line.startswith(indent) or text[:1].isspace() or not text:
            pending = []
            continue
        if text.startswith("#"):
            pending.append(text.lstrip("#").strip())
            continue
        code, _, trailing = text.partition("  # ")
        m = _DEF.match(code)
        comment = " ".join([*(pending if above else []), trailing.strip()]).strip()
        if m and comment and not comment.startswith(("fmt:", "noqa", "type:")):
            found[m.group("name")] = comment
        pending = []
    return found


def type_name(tp: Any) -> str:
    """A field's type as a wap.toml author reads it."""
    origin, args = get_origin(tp), get_args(tp)
    if origin is Annotated:
        inner = get_args(args[0]) if get_origin(args[0]) in (Union, types.UnionType) else ()
        return "check" if inner and all(hasattr(a, "model_fields") for a in inner) else type_name(args[0])
    if origin is Literal:
        return " \\| ".join(f'`"{a}"`' if isinstance(a, str) else f"`{a}`" for a in args)
    if origin in (Union, types.UnionType):
        return " \\| ".join(type_name(a) for a in args if a is not type(None)) + (
            " (optional)" if type(None) in args else ""
        )
    if origin is list:
        return f"list of {type_name(args[0])}"
    if origin is dict:
        return f"table of {type_name(args[1])}"
    if tp is SecretStr:
        return "string (secret)"
    names = {str: "string", int: "integer", float: "number", bool: "boolean"}
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return "section"
    return names.get(tp, getattr(tp, "__name__", str(tp)))


def toml_value(value: Any) -> str:
    """A default as it would be written in wap.toml."""
    if value is None:
        return "unset"
    if isinstance(value, bool):
        return "`true`" if value else "`false`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, (list, tuple)):
        return "`[]`" if not value else "`[" + ", ".join(toml_value(v).strip("`") for v in value) + "]`"
    if isinstance(value, dict):
        return "`{}`" if not value else f"`{value}`"
    return f"`{value}`"


def default_of(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    if field.default_factory is not None:
        return toml_value(field.default_factory())  # type: ignore[call-arg]  # our factories take no argument
    return toml_value(field.default)


def _text(text: str) -> str:
    """Prose from the code as markdown: `<`, `>` and `*` outside code spans shown as they are."""
    parts = text.split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")
    return "`".join(parts)


def _cell(text: str) -> str:
    """One table cell: prose on one line, `|` escaped outside code spans (inside one, a table keeps it as it
    is, and an escape would show as `\\|`)."""
    parts = _text(" ".join(text.split())).split("`")
    for i in range(0, len(parts), 2):
        parts[i] = parts[i].replace("|", "\\|")
    return "`".join(parts)


def _fields_table(model: type[BaseModel], skip: tuple[str, ...] = ()) -> list[str]:
    comments = source_comments_of(model)
    rows = ["| key | type | default | description |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        if name in skip or field.exclude or _nested(field.annotation):
            continue
        key = field.alias or name
        desc = field.description or comments.get(name, "")
        rows.append(f"| `{key}` | {type_name(field.annotation)} | {default_of(field)} | {_cell(desc)} |")
    return rows


def source_comments_of(model: type) -> dict[str, str]:
    """Comments of a class and of the wapflow classes it inherits fields from (nearest wins)."""
    found: dict[str, str] = {}
    for klass in reversed(model.__mro__):
        if klass.__module__.startswith("wapflow.") and inspect.get_annotations(klass):
            found.update(source_comments(klass))
    return found


def own_doc(model: type) -> str:
    """The nearest docstring written in wapflow (not pydantic's BaseModel's)."""
    for klass in model.__mro__:
        if klass.__module__.startswith("wapflow.") and klass.__dict__.get("__doc__"):
            return inspect.cleandoc(klass.__doc__ or "")
    return ""


def _nested(tp: Any) -> type[BaseModel] | None:
    """The model of a section or of a table of named sections (`dict[str, Model]`), if the type is one."""
    origin, args = get_origin(tp), get_args(tp)
    if origin in (Union, types.UnionType):
        models = [a for a in args if a is not type(None)]
        return _nested(models[0]) if len(models) == 1 else None
    if origin is dict:
        return _nested(args[1])
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return tp
    return None


# --- (a) wap.toml ---------------------------------------------------------------------------------

# The placeholder for a named section's name, by the key that holds the named sections.
_NAMES = {"tables": '"NS.TABLE"', "models": '"NS.TABLE"'}


def _sections(model: type[BaseModel], path: str) -> Iterator[tuple[str, type[BaseModel]]]:
    for name, field in model.model_fields.items():
        sub = _nested(field.annotation)
        if sub is None or field.exclude:
            continue
        named = get_origin(field.annotation) is dict
        here = f"{path}.{name}" if path else name
        here += f".{_NAMES.get(name, 'NAME')}" if named else ""
        yield here, sub
        yield from _sections(sub, here)


def config_reference_markdown() -> str:
    """Every wap.toml section and key: type, default and description, from `wapflow.config.WapConfig`."""
    from wapflow.config import WapConfig

    out = [
        "# wap.toml reference",
        "",
        "Generated from the configuration models in `wapflow/config/` at build time. Unknown keys and",
        "wrong types are errors (exit 2) that name the file, the section and the key. See the",
        "[configuration guide](../guides/configuration.md) for how the pieces fit together.",
        "",
    ]
    for path, model in _sections(WapConfig, ""):
        out += [f"## `[{path}]`", ""]
        doc = own_doc(model)
        if doc:
            out += [_text(doc), ""]
        rows = _fields_table(model)
        out += [*rows, ""] if len(rows) > 2 else ["(only named sections, below)", ""]
        if "checks" in model.model_fields:
            out += ["`checks` holds check declarations: see the [check types](checks.md).", ""]
    return "\n".join(out)


# --- (b) CLI --------------------------------------------------------------------------------------


# Typer 0.29 carries its own copy of Click (typer._click), so commands are read by their Click attributes
# (commands, params, opts, help) rather than checked against Click's classes.
def _walk(cmd: Any, path: str) -> Iterator[tuple[str, Any]]:
    yield path, cmd
    for name, sub in getattr(cmd, "commands", {}).items():
        yield from _walk(sub, f"{path} {name}")


def cli_commands() -> list[tuple[str, Any]]:
    """(`wap ...` path, command) for every command and group of the Typer app, in `wap --help` order: by its
    panel (Start, Run, Look...), then as registered."""
    import typer

    from wapflow.cli.root import PANELS, app

    root: Any = typer.main.get_command(app)  # a Click group (Typer's own copy of Click)
    top = sorted(root.commands.items(), key=lambda kv: PANELS.index(_panel(kv[1])))  # stable: registration order
    return [walked for name, cmd in top for walked in _walk(cmd, f"wap {name}")]


def _panel(cmd: Any) -> str:
    """The `wap --help` panel of a top-level command (Typer's rich_help_panel)."""
    return str(getattr(cmd, "rich_help_panel", None) or "")


def _usage(path: str, cmd: Any) -> str:
    words = [path, "[OPTIONS]"] if any(p.param_type_name == "option" for p in cmd.params) else [path]
    for p in cmd.params:
        if p.param_type_name == "argument":
            word = (p.name or "").upper() + ("..." if p.nargs == -1 else "")
            words.append(word if p.required else f"[{word}]")
    if getattr(cmd, "commands", None):
        words.append("[COMMAND]" if getattr(cmd, "invoke_without_command", False) else "COMMAND")
    return " ".join(words)


def _param_row(p: Any, ctx: Any) -> str:
    kind = "flag" if getattr(p, "is_flag", False) else p.display_type(ctx).strip("<>")
    if p.param_type_name == "argument":
        name = f"`{(p.name or '').upper()}`" + ("" if p.required else " (optional)")
        return f"| {name} | argument: {kind} | | {_cell(p.help or '')} |"
    opts = ", ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
    default = "" if p.default in (None, False, ()) or callable(p.default) else f"`{p.default}`"
    return f"| {opts} | {kind} | {default} | {_cell(p.help or '')} |"


def cli_reference_markdown() -> str:
    """Every `wap` command with its help, arguments and options, from the Typer app."""
    out = [
        "# CLI reference",
        "",
        "Generated from the `wap` Typer app (`wapflow/cli/root.py`) at build time; `wap COMMAND --help`",
        "prints the same. Every command that reads a configuration takes `--config PATH` (else",
        "`$WAP_CONFIG`, else `./wap.toml`, else built-in defaults); `--json` prints one JSON document on",
        "stdout; `--verbose` anywhere on the line also shows Spark's logs. Results go to stdout, progress",
        "and errors to stderr. Exit codes: see [exit codes](exit-codes.md).",
        "",
    ]
    panel = None
    for path, cmd in cli_commands():
        if path.count(" ") == 1 and _panel(cmd) != panel:  # a top-level command opens its help panel's section
            panel = _panel(cmd)
            out += [f"## {panel}", ""]
        ctx = cmd.context_class(cmd, info_name=path)
        out += [f"### `{path}`", "", "```", _usage(path, cmd), "```", ""]
        out += [_text(inspect.cleandoc(cmd.help or "")), ""]
        params = [p for p in cmd.params if p.name != "help" and not getattr(p, "hidden", False)]
        if params:
            out += ["| parameter | type | default | help |", "|---|---|---|---|"]
            out += [_param_row(p, ctx) for p in params] + [""]
        if getattr(cmd, "commands", None):
            out += ["Subcommands: " + ", ".join(f"`{path} {n}`" for n in cmd.commands), ""]
    return "\n".join(out)


# --- (c) check types ------------------------------------------------------------------------------


def checks_reference_markdown() -> str:
    """Every check type, from the registry of check classes (wapflow.audit.registry)."""
    from wapflow.audit.registry import check_reference, check_reference_markdown

    out = [
        "# Check types",
        "",
        f"Generated from the check classes (`wapflow/audit/spec.py`) at build time: {len(check_reference())} check",
        "types. Every check takes `severity` (`error` blocks the run, `warn` publishes and reports), an",
        "optional `name` and an optional `filter`. See the [checks guide](../guides/checks.md) for",
        "how the audit picks the cheapest evidence.",
        "",
    ]
    return "\n".join(out) + check_reference_markdown()


# --- (d) exit codes -------------------------------------------------------------------------------


def exit_code_rows() -> list[tuple[int, str, str]]:
    """(code, name, meaning) from errors.exit_code_table(), with the error kinds that map to each code."""
    from wapflow import errors

    kinds: dict[int, list[str]] = {}
    for klass in _subclasses(errors.WapError):
        kinds.setdefault(klass.exit_code, []).append(klass.kind)
    rows = []
    for code, name, meaning in errors.exit_code_table():
        named = [k for k in errors.KINDS if k in kinds.get(code, [])]
        rows.append((code, name, meaning + (f" (error kinds: {', '.join(f'`{k}`' for k in named)})" if named else "")))
    return rows


def _subclasses(klass: type[WapError]) -> list[type[WapError]]:
    found: list[type[WapError]] = []
    for sub in klass.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def exit_codes_reference_markdown() -> str:
    """The exit codes of `wap`, with the error kinds behind each."""
    out = [
        "# Exit codes",
        "",
        "Generated from `wapflow/errors.py` at build time. With `--json`, a failed run's `error` holds the",
        "`kind`, `retryable` (true only for `transient`) and `exit_code`. Only exit 5 is worth retrying",
        "unchanged; 2, 3 and 4 fail the same way until someone fixes the file, the configuration, the",
        "machine or the code.",
        "",
        "| code | name | meaning |",
        "|---|---|---|",
    ]
    out += [f"| {code} | `{const}` | {_cell(text)} |" for code, const, text in exit_code_rows()]
    out += [
        "",
        "`wap ingest`, `wap backfill` and `wap watch --once` run many files: 0 when every file they ran was",
        "published (or nothing was new), 1 when a file was blocked, 3 when a file failed (failed wins over",
        "blocked), 2 on bad usage or configuration. See [the outer loop](../guides/outer-loop.md).",
        "",
    ]
    return "\n".join(out)


# --- module map -----------------------------------------------------------------------------------


def module_rows() -> list[tuple[str, str]]:
    """(module, first paragraph of its docstring) for every module of the package, read without importing."""
    import ast
    from pathlib import Path

    import wapflow

    root = Path(wapflow.__file__).parent
    rows = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(root.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        rows.append((name, doc.split("\n\n")[0]))
    return rows


def modules_reference_markdown() -> str:
    """Where each part of wapflow lives: every module with the first paragraph of its docstring."""
    out = [
        "# Modules",
        "",
        "Generated from the module docstrings under `src/wapflow` at build time. See",
        "[development](../development.md) for how the code is checked.",
        "",
        "| module | what it is |",
        "|---|---|",
    ]
    out += [f"| `{name}` | {_cell(doc)} |" for name, doc in module_rows()]
    return "\n".join([*out, ""])


# page path under docs/ -> its markdown, for docs/gen_reference.py
PAGES = {
    "reference/config.md": config_reference_markdown,
    "reference/cli.md": cli_reference_markdown,
    "reference/checks.md": checks_reference_markdown,
    "reference/exit-codes.md": exit_codes_reference_markdown,
    "reference/modules.md": modules_reference_markdown,
}
