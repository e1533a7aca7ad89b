"""Every pointer to the documentation in wapflow's code (an error's hint, `wap init`'s starter file, a
docstring) names a page that exists, and a heading of it that exists (no Spark)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

from wapflow import _docs

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src" / "wapflow"
DOCS = ROOT / "docs"

DOCS_POINTER = re.compile(r"docs/(?P<page>[\w./-]+?\.md)(?:#(?P<anchor>[\w-]+))?")
# A markdown link in a generated reference page (relative to docs/reference/).
MD_LINK = re.compile(r"\]\((?P<page>[\w./-]+?\.md)(?:#(?P<anchor>[\w-]+))?\)")
# `README "Alerts"`, `README: Deploying`, `the README's "S3"`: a section of the README by its heading.
README_SECTION = re.compile(r"README(?:'s)?(?::\s*|\s+)(?:\"(?P<quoted>[^\"]+)\"|(?P<word>[A-Z][\w-]*))")


def _literals() -> list[tuple[str, int, str]]:
    """(file, line, text) of every string literal (docstrings, f-string parts) in src/wapflow."""
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.append((str(path.relative_to(ROOT)), node.lineno, node.value))
    return found


def _comments() -> list[tuple[str, int, str]]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if "#" in line:
                found.append((str(path.relative_to(ROOT)), i, line[line.index("#") :]))
    return found


def _page_markdown(page: str) -> str | None:
    """A page under docs/: its file, or the reference page the build generates from the code."""
    if page in _docs.PAGES:
        return _docs.PAGES[page]()
    path = (DOCS / page).resolve()
    return path.read_text(encoding="utf-8") if path.is_file() and DOCS in path.parents else None


def anchors(markdown: str) -> set[str]:
    """The ids mkdocs gives the page's headings (its toc slugs), and explicit `{#id}`s."""
    ids: set[str] = set()
    in_code = False
    for line in markdown.splitlines():
        if line.startswith("```"):
            in_code = not in_code
        if in_code or not re.match(r"#{1,6} ", line):
            continue
        text = line.lstrip("#").strip()
        explicit = re.search(r"\{:?\s*#([\w-]+)[^}]*\}\s*$", text)
        if explicit:
            ids.add(explicit.group(1))
            continue
        ids.add(slugify(text.replace("`", ""), "-"))
    return ids


def _problem(page: str, anchor: str | None) -> str | None:
    markdown = _page_markdown(page)
    if markdown is None:
        return f"docs/{page} does not exist"
    if anchor and anchor not in anchors(markdown):
        return f"docs/{page} has no heading #{anchor}"
    return None


def _pointers() -> list[tuple[str, str, str | None, str]]:
    """(where, page under docs/, anchor, text) for every docs pointer in the code's strings and comments."""
    pointers = []
    for file, line, text in _literals() + _comments():
        for m in DOCS_POINTER.finditer(text):
            pointers.append((f"{file}:{line}", m.group("page"), m.group("anchor"), text))
        if file.endswith("_docs.py"):  # the generated pages' links, relative to docs/reference/
            for m in MD_LINK.finditer(text):
                page = str(Path("reference", m.group("page"))).replace("reference/../", "")
                pointers.append((f"{file}:{line}", page, m.group("anchor"), text))
    return pointers


def test_the_code_points_to_the_docs() -> None:
    pages = {page for _, page, _, _ in _pointers()}
    assert {"guides/configuration.md", "guides/s3.md", "guides/deploying.md"} <= pages


@pytest.mark.parametrize("where,page,anchor,text", _pointers(), ids=lambda v: v if isinstance(v, str) else "")
def test_every_docs_pointer_in_the_code_names_a_page_and_heading_that_exist(
    where: str, page: str, anchor: str | None, text: str
) -> None:
    problem = _problem(page, anchor)
    assert problem is None, f"{where}: {problem} (in {text[:120]!r})"


def test_every_readme_section_the_code_names_is_a_heading_of_the_readme() -> None:
    headings = {
        line.lstrip("#").strip().replace("`", "")
        for line in (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
        if re.match(r"#{1,6} ", line)
    }
    wrong = []
    for file, line, text in _literals() + _comments():
        for m in README_SECTION.finditer(text):
            name = m.group("quoted") or m.group("word")
            if not any(h == name or h.startswith(name + ":") for h in headings):
                wrong.append(f"{file}:{line}: README section {name!r} (no such heading)")
    assert not wrong, "\n".join(wrong)


def test_the_starter_wap_toml_points_to_a_guide_that_exists() -> None:
    from wapflow.config import STARTER

    first = STARTER.splitlines()[0]
    m = DOCS_POINTER.search(first)
    assert m, first
    assert _problem(m.group("page"), m.group("anchor")) is None


def test_anchors_are_the_ids_mkdocs_gives_headings() -> None:
    page = "# T\n\n## See what approving would change: `wap diff RUN`\n\n```\n## not a heading\n```\n## X {#own-id}\n"
    assert anchors(page) == {"t", "see-what-approving-would-change-wap-diff-run", "own-id"}
