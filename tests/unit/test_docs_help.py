"""`wap --help` and every command's `--help` print their help texts whole: a `[section]` of wap.toml, a
`<placeholder>` or a backticked word in a help string is on the terminal as written (no JVM)."""

from __future__ import annotations

import inspect
import re

import pytest
from typer.testing import CliRunner

from wapflow import _docs
from wapflow.cli import app

COMMANDS = _docs.cli_commands()
BRACKETED = re.compile(r"\[[^\[\]\s]+\]")  # [alerts], [sources.NAME], [alerts.sinks.NAME]


def _help_output(args: list[str]) -> str:
    res = CliRunner().invoke(app, [*args, "--help"], terminal_width=200)
    assert res.exit_code == 0, res.output
    return " ".join(res.output.replace("│", " ").split())  # the panels' borders and wrapping away


def _texts(cmd) -> list[str]:
    texts = [inspect.cleandoc(cmd.help or "").partition("\f")[0]]
    return texts + [p.help for p in cmd.params if getattr(p, "help", None)]


def _words(text: str) -> list[str]:
    return [w.replace("`", "").strip(".,;:()") for w in text.split() if w.replace("`", "").strip(".,;:()")]


def test_the_root_help_keeps_bracketed_words_of_each_command_summary() -> None:
    out = _help_output([])
    assert "([alerts] in wap.toml)" in out
    for path, cmd in COMMANDS:
        if len(path.split()) == 2:  # the root lists its direct commands' first paragraph
            summary = inspect.cleandoc(cmd.help or "").split("\n\n")[0]
            for word in BRACKETED.findall(summary):
                assert word in out, (path, word)


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS])
def test_every_word_of_a_command_help_survives_on_the_terminal(path: str) -> None:
    cmd = dict(COMMANDS)[path]
    out = _help_output(path.split()[1:])
    for text in _texts(cmd):
        for word in BRACKETED.findall(text):
            assert word in out, f"{path}: {word!r} of {text!r} is not in its --help"
        for word in _words(text):
            assert word in out, f"{path}: {word!r} of {text!r} is not in its --help"


def test_the_commands_with_bracketed_words_are_checked() -> None:
    """The words that Rich's markup ate before: the test above must see them."""
    bracketed = {path for path, cmd in COMMANDS for text in _texts(cmd) if BRACKETED.search(text)}
    assert {"wap alerts", "wap watch", "wap ingest", "wap dashboard", "wap run-tables"} <= bracketed
