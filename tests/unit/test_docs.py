"""The generated reference pages of the documentation site name everything the code defines (no Spark)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from wapflow import _docs, errors
from wapflow.audit.spec import CHECK_MODELS
from wapflow.config import WapConfig, load_config


def test_cli_reference_names_every_command_and_option() -> None:
    page = _docs.cli_reference_markdown()
    commands = _docs.cli_commands()
    paths = [path for path, _ in commands]
    for expected in ("wap run", "wap ingest", "wap watch", "wap demo generate", "wap alerts check", "wap nessie up"):
        assert expected in paths
    for path, cmd in commands:
        assert f"## `{path}`" in page
        for param in cmd.params:
            if param.param_type_name == "option" and param.name != "help":
                assert f"`{param.opts[0]}`" in page.split(f"## `{path}`")[1].split("\n## ")[0], (path, param.opts)


def test_checks_reference_names_every_check_type_and_parameter() -> None:
    page = _docs.checks_reference_markdown()
    for name, model in CHECK_MODELS.items():
        section = page.split(f"## `{name}`\n")[1].split("\n## ")[0]
        for field, info in model.model_fields.items():
            if field != "check":
                assert f"| `{info.alias or field}` |" in section, (name, field)
    assert "Row-level" in page.split("## `not_null`")[1].split("\n## ")[0]
    assert "Batch-level" in page.split("## `row_count`")[1].split("\n## ")[0]


def test_config_reference_names_every_section_and_key_with_its_default() -> None:
    page = _docs.config_reference_markdown()
    sections = re.findall(r"^## `\[(.+)\]`$", page, re.MULTILINE)
    assert sections == [
        "lakehouse",
        'tables."NS.TABLE"',
        'tables."NS.TABLE".maintenance',
        "runs.NAME",
        'models."NS.TABLE"',
        "sources.NAME",
        "watch",
        "s3",
        "alerts",
        "alerts.sinks.NAME",
        "maintenance",
        "lineage",
        "dashboard",
        "dashboard.oidc",
    ]
    for key in WapConfig.model_fields["lakehouse"].annotation.model_fields:  # type: ignore[union-attr]  # a model
        assert f"| `{key}` |" in page
    assert '| `schema` | `"strict"` \\| `"add_columns"` \\| `"ignore_extra"` | `"strict"` |' in page  # alias, default
    assert "| `max_files_per_run` | integer | `100` |" in page
    assert "| `interval` | number | `10.0` | seconds between listings" in page  # the field's comment
    assert "| `table` | string | required |" in page


def test_exit_code_reference_has_every_code_and_kind() -> None:
    rows = _docs.exit_code_rows()
    assert [code for code, _, _ in rows] == [0, 1, 2, 3, 4, 5, 6, 130]
    text = {code: meaning for code, _, meaning in rows}
    assert "`transient`" in text[errors.EXIT_TRANSIENT]
    assert all(f"`{kind}`" in text[3] for kind in ("input", "environment", "bug"))
    assert "`conflict`" in text[4] and "`config`" in text[2]
    assert "| 5 | `transient` |" in _docs.exit_codes_reference_markdown()
    assert _docs.exit_code_rows()[5][1] == errors.exit_code_table()[5][1]


def test_the_readme_names_every_exit_code_of_the_one_table() -> None:
    root = next(p for p in Path(__file__).parents if (p / "pyproject.toml").exists())
    text = " ".join((root / "README.md").read_text(encoding="utf-8").split())
    for code, name, _ in errors.exit_code_table():
        assert f"{code} {name}" in text, (code, name)


def test_source_comments_reads_the_comment_above_and_beside_a_field() -> None:
    class Sample:
        # above,
        # on two lines
        a: int = 1
        b: str = "x"  # beside

        def c(self) -> None:
            d = 2  # inside a method: not a field
            del d

    assert _docs.source_comments(Sample) == {"a": "above, on two lines", "b": "beside"}


def test_markdown_from_code_keeps_angle_brackets_and_pipes() -> None:
    assert _docs._cell("wap_<run-id> | `a <b>`") == "wap_&lt;run-id&gt; \\| `a <b>`"


def test_every_module_is_in_the_module_map() -> None:
    names = [name for name, _ in _docs.module_rows()]
    assert {"wapflow", "wapflow.config", "wapflow.cli.root", "wapflow._docs"} <= set(names)
    assert all(doc for name, doc in _docs.module_rows() if name in ("wapflow.config", "wapflow.errors"))


def test_the_readme_wap_toml_examples_load(tmp_path: Path) -> None:
    root = next(p for p in Path(__file__).parents if (p / "pyproject.toml").exists())  # wherever tests/ puts this file
    readme = (root / "README.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```toml\n(.*?)```", readme, re.DOTALL)
    assert blocks
    (tmp_path / "wap.toml").write_text("\n".join(blocks), encoding="utf-8")
    config = load_config(tmp_path / "wap.toml")
    assert config.tables["nyc.trips"].checks and config.sources["trips"].table == "nyc.trips"


def test_every_wap_command_the_readme_shows_parses() -> None:
    """Each `wap ...` line of the README's bash blocks names a real command with real options."""
    root = next(p for p in Path(__file__).parents if (p / "pyproject.toml").exists())
    readme = (root / "README.md").read_text(encoding="utf-8")
    commands = dict(_docs.cli_commands())
    shown = [
        line.split("  #")[0].strip()
        for block in re.findall(r"```bash\n(.*?)```", readme, re.DOTALL)
        for line in block.splitlines()
        if line.startswith("wap ")
    ]
    assert len(shown) >= 15
    for line in shown:
        words = shlex.split(line.replace("<", "").replace(">", "").split(";")[0])
        path = "wap"
        while len(words) > 1 and f"{path} {words[1]}" in commands:
            path = f"{path} {words.pop(1)}"
        cmd = commands[path]
        cmd.make_context(path, words[1:])  # parses arguments and options; raises on an unknown one


def test_no_merge_conflict_markers_left_in_the_docs_or_the_readme() -> None:
    """mkdocs --strict builds a page with a conflict's markers in it (they are valid Markdown)."""
    root = next(p for p in Path(__file__).parents if (p / "pyproject.toml").exists())
    marker = re.compile(r"^(<{7} |>{7} |={7}$)", re.MULTILINE)
    found = [str(p) for p in [root / "README.md", *(root / "docs").rglob("*.md")] if marker.search(p.read_text())]
    assert found == []
