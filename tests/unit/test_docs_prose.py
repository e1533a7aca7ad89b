"""The documentation reads in short pieces: no paragraph and no list item of docs/**/*.md or README.md runs
over 120 words (figures go in tables, detail in the guide it belongs to), and the pages a newcomer opens
first hold what they promise (no JVM)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from wapflow import _docs

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
MAX_WORDS = 120

BULLET = re.compile(r"^\s*(?:[-*+]|\d+[.)])\s+")


def blocks(markdown: str) -> Iterator[tuple[int, str, str]]:
    """(first line number, kind, text) of each paragraph ("prose") and list item ("item") of a page; code
    blocks, tables, headings, admonition titles and HTML are none of them."""
    lines = markdown.splitlines()
    fence: str | None = None
    current: list[str] = []
    kind, start = "prose", 0

    def flush() -> Iterator[tuple[int, str, str]]:
        if current:
            yield start, kind, " ".join(s.strip() for s in current)
        current.clear()

    for i, line in enumerate(lines, 1):
        stripped = line.strip()
        if fence is not None:
            if stripped.startswith(fence):
                fence = None
            continue
        m = re.match(r"(`{3,}|~{3,})", stripped)
        if m:
            yield from flush()
            fence = m.group(1)
            continue
        if not stripped or stripped.startswith(("|", "#", "<", "!!!", "???", "---")) or line.startswith("    " * 2):
            yield from flush()  # a blank line, a table row, a heading, HTML, an indented code block
            continue
        if BULLET.match(line):
            yield from flush()
            kind, start = "item", i
        elif not current:
            kind, start = "prose", i
        current.append(BULLET.sub("", line))
    yield from flush()


def words(text: str) -> int:
    text = re.sub(r"\]\([^)]*\)", "]", text)  # a link counts by its text, not its address
    return len(text.split())


def test_blocks_splits_prose_items_and_skips_code_and_tables() -> None:
    page = "\n".join(
        [
            "# Title",
            "",
            "one two",
            "three",
            "- an item",
            "  going on",
            "- another",
            "",
            "```",
            "code " * 200,
            "```",
            "| a | b |",
            "|---|---|",
            "after the table",
        ]
    )
    found = [(kind, text) for _, kind, text in blocks(page)]
    assert found == [
        ("prose", "one two three"),
        ("item", "an item going on"),
        ("item", "another"),
        ("prose", "after the table"),
    ]
    assert words("see [the guide](guides/a-very/long/address.md#and-anchor) now") == 4


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_paragraph_or_list_item_over_120_words(page: Path) -> None:
    long = [
        f"{page.relative_to(ROOT)}:{line}: a {'paragraph' if kind == 'prose' else 'list item'} of {n} words "
        f"({text[:80]}...)"
        for line, kind, text in blocks(page.read_text(encoding="utf-8"))
        if (n := words(text)) > MAX_WORDS
    ]
    assert not long, "\n".join(long)


def _tables(markdown: str) -> list[list[str]]:
    """Each table of a page as its rows; a blank line ends a table."""
    tables: list[list[str]] = []
    rows: list[str] = []
    for line in [*markdown.splitlines(), ""]:
        if line.startswith("|"):
            rows.append(line)
        elif rows:
            tables.append(rows)
            rows = []
    return tables


def test_getting_started_lists_every_command_of_wap_help_in_whole_tables() -> None:
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    tables = _tables(page)
    listed = " ".join(row.split("|")[1] for rows in tables for row in rows)
    for path, _ in _docs.cli_commands():
        if len(path.split()) == 2:
            assert re.search(rf"`{re.escape(path)}[ `]", listed), f"{path} is not in getting-started's tables"
    for rows in tables:
        assert re.match(r"\|\s*-", rows[1]), f"a table without its header (a blank line split it?): {rows[0]}"
        for row in rows:
            assert "\\|" not in row, f"a literal \\| in a table row: {row}"


def test_the_tutorial_is_linked_from_the_readme_first_screen_the_index_and_the_nav() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    assert any("docs/tutorial.md" in line for line in readme[:40])
    assert "(tutorial.md)" in (ROOT / "docs" / "index.md").read_text(encoding="utf-8")
    assert "tutorial.md" in (ROOT / "mkdocs.yml").read_text(encoding="utf-8")


def test_the_built_site_opens_from_disk_and_make_docs_serve_serves_it() -> None:
    """Links as page.html (a folder link opened from file:// shows a listing), and a served site for search."""
    mkdocs = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    assert re.search(r"^use_directory_urls: false$", mkdocs, re.MULTILINE)
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^docs-serve:.*\n(?:#.*\n)*\t.*mkdocs serve", makefile, re.MULTILINE)
    assert "make docs-serve" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_no_page_shows_an_escaped_pipe_in_code() -> None:
    """Inside a code span a table keeps `|` as it is; a `\\|` there shows its backslash (as getting-started's
    `wap query ... [--branch B \\| --as-of ...]` did). Every page under docs/ and every generated one."""
    import markdown

    pages = {str(p.relative_to(ROOT)): p.read_text(encoding="utf-8") for p in (ROOT / "docs").rglob("*.md")}
    pages |= {f"docs/{path} (generated)": make() for path, make in _docs.PAGES.items()}
    for name, text in pages.items():
        html = markdown.markdown(text, extensions=["tables", "attr_list", "admonition", "pymdownx.superfences"])
        shown = [c for c in re.findall(r"<code>(.*?)</code>", html, re.DOTALL) if "\\|" in c and "\n" not in c]
        assert not shown, f"{name}: {shown[:3]}"
