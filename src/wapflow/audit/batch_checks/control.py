"""The control_totals check: the batch against what its producer declared it sent, in a manifest beside its files.

A producer that writes a manifest (JSON or CSV) with its row counts, column sums, file sizes or checksums lets a
run check the delivery exactly: a short, long or duplicated delivery, a truncated or replaced file, a file it
named that never landed. No history is needed, so it holds on the first run and through a storm week alike.

The manifest's formats (docs/guides/checks.md shows both):
- JSON: {"rows": 1000, "sums": {"amount": 12345.67}, "files": {"a.csv": {"rows": 600, "bytes": 51234,
  "sha256": "..."}}}; every key optional, "files" also a list of objects with a "name".
- CSV: a header with `file` (names relative to the manifest's folder) and any of `rows`, `bytes`, `sha256`,
  `md5`; every other column is a column of the table whose per-file sums add up to the declared sum.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from wapflow import display
from wapflow.audit.batch_checks.reconcile import Tolerant, shown
from wapflow.audit.checktype import Against, Evidence, Rule, Verdict
from wapflow.errors import ConfigError, WapError, did_you_mean
from wapflow.storage.files import MANIFEST_NAMES, MANIFEST_SUFFIXES, is_manifest_name
from wapflow.vocabulary import parse_duration

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from wapflow.audit.checktype import AuditContext, Compiled, Delivery

PLACEHOLDERS = ("{dir}", "{name}", "{stem}")
DIGESTS = ("sha256", "md5")
# What a CSV manifest's columns mean besides sums of the table's columns.
_CSV_KEYS = ("file", "rows", "bytes", *DIGESTS)
# How many names a report lists before "and N more".
_SHOWN = 5


class ManifestError(ValueError):
    """A manifest that cannot be read as one: the producer's mistake, so the delivery is not checked but blocked."""


@dataclass
class FileDeclared:
    rows: int | None = None
    size: int | None = None
    digests: dict[str, str] = field(default_factory=dict)


@dataclass
class Declared:
    """What one manifest declares: totals, and the files it names (relative to its folder; None: it names none)."""

    uri: str
    rows: int | None = None
    sums: dict[str, Decimal] = field(default_factory=dict)
    files: dict[str, FileDeclared] | None = None


def manifest_for(pattern: str, uri: str) -> str:
    """The manifest's location for the data file `uri`: the pattern with {dir}, {name} and {stem} filled in; a
    pattern without a folder is in the data file's folder."""
    folder, _, name = uri.rpartition("/")
    stem = name.rsplit(".", 1)[0] if "." in name else name
    text = pattern.replace("{dir}", folder).replace("{name}", name).replace("{stem}", stem)
    return text if "/" in text else f"{folder}/{text}"


def _number(v: Any, what: str) -> Decimal:
    if isinstance(v, bool) or not isinstance(v, (int, float, str, Decimal)):
        raise ManifestError(f"{what} is {json.dumps(v, default=str)}, not a number")
    try:
        d = Decimal(str(v).strip())
    except InvalidOperation:
        raise ManifestError(f"{what} is {str(v)!r}, not a number") from None
    if not d.is_finite():
        raise ManifestError(f"{what} is {v}, not a finite number")
    return d


def _count(v: Any, what: str) -> int:
    d = _number(v, what)
    if d != d.to_integral_value() or d < 0:
        raise ManifestError(f"{what} is {v}, not a count")
    return int(d)


def _file(name: str, d: dict[str, Any], where: str) -> FileDeclared:
    unknown = sorted(set(d) - {"name", "rows", "bytes", *DIGESTS})
    if unknown:
        raise ManifestError(f"{where} has key(s) {', '.join(unknown)}; a file takes rows, bytes, sha256, md5")
    out = FileDeclared(
        rows=None if d.get("rows") in (None, "") else _count(d["rows"], f"{where}'s rows"),
        size=None if d.get("bytes") in (None, "") else _count(d["bytes"], f"{where}'s bytes"),
    )
    for algo in DIGESTS:
        if d.get(algo) not in (None, ""):
            out.digests[algo] = str(d[algo]).strip().lower()
    return out


def parse_manifest(uri: str, data: bytes) -> Declared:
    """One manifest's declaration, or ManifestError saying what is wrong with it."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise ManifestError("it is not UTF-8 text") from None
    if uri.endswith(".csv"):
        return _parse_csv(uri, text)
    try:
        doc = json.loads(text, parse_float=Decimal)
    except json.JSONDecodeError as e:
        raise ManifestError(f"it is not valid JSON ({e.msg} at line {e.lineno})") from None
    if not isinstance(doc, dict):
        raise ManifestError("it is not a JSON object")
    unknown = sorted(set(doc) - {"rows", "sums", "files"})
    if unknown:
        raise ManifestError(f"it has key(s) {', '.join(unknown)}; a manifest takes rows, sums and files")
    out = Declared(uri)
    if doc.get("rows") is not None:
        out.rows = _count(doc["rows"], "rows")
    sums = doc.get("sums") or {}
    if not isinstance(sums, dict):
        raise ManifestError('"sums" is not an object of column -> sum')
    out.sums = {str(k): _number(v, f"the sum of {k}") for k, v in sums.items()}
    files = doc.get("files")
    if files is not None:
        if isinstance(files, dict):
            items = list(files.items())
        elif isinstance(files, list) and all(isinstance(f, dict) and isinstance(f.get("name"), str) for f in files):
            items = [(f["name"], f) for f in files]
        else:
            raise ManifestError('"files" is neither an object of name -> file nor a list of objects with a "name"')
        out.files = {}
        for name, d in items:
            if not isinstance(d, dict):
                raise ManifestError(f'file "{name}" is not an object')
            out.files[str(name)] = _file(str(name), d, f'file "{name}"')
    if out.rows is None and out.files and all(f.rows is not None for f in out.files.values()):
        out.rows = sum(f.rows or 0 for f in out.files.values())
    return out


def _parse_csv(uri: str, text: str) -> Declared:
    rows = list(csv.DictReader(io.StringIO(text)))
    header = [h.strip() for h in (csv.DictReader(io.StringIO(text)).fieldnames or [])]
    if "file" not in header:
        raise ManifestError(f"its header ({', '.join(header) or 'empty'}) has no `file` column")
    sum_cols = [h for h in header if h not in _CSV_KEYS]
    files: dict[str, FileDeclared] = {}
    totals = dict.fromkeys(sum_cols, Decimal(0))
    for i, raw in enumerate(rows, start=2):
        r = {(k or "").strip(): (v or "").strip() for k, v in raw.items()}
        name = r.get("file", "")
        if not name:
            raise ManifestError(f"line {i} names no file")
        files[name] = _file(name, {k: r.get(k) for k in ("rows", "bytes", *DIGESTS)}, f"line {i} ({name})")
        for col in sum_cols:
            if not r.get(col):
                raise ManifestError(f"line {i} ({name}) has no value for {col}")
            totals[col] += _number(r[col], f"line {i}'s {col}")
    counted = bool(files) and all(f.rows is not None for f in files.values())
    return Declared(uri, rows=sum(f.rows or 0 for f in files.values()) if counted else None, sums=totals, files=files)


# A file's own metadata declares its totals under these names (S3: x-amz-meta-rows, x-amz-meta-sum-amount; a
# local file: user.rows, user.sum-amount); other names are the producer's and left alone.
SUM_PREFIXES = ("sum-", "sum_")


def parse_metadata(uri: str, metadata: dict[str, str], what: str = "metadata") -> Declared | None:
    """What one file's metadata declares about it (rows, bytes, sha256, md5, sum-<column>), or None when it
    declares none of them; ManifestError for a value that is not one."""
    md = {k.lower(): v for k, v in metadata.items()}
    sums = {k[len(p) :]: v for k, v in md.items() for p in SUM_PREFIXES if k.startswith(p) and len(k) > len(p)}
    known = {k: md[k] for k in ("rows", "bytes", *DIGESTS) if k in md}
    if not sums and not known:
        return None
    name = uri.rpartition("/")[2]
    f = _file(name, known, f"{name}'s {what}")
    out = Declared(uri, rows=f.rows, files={name: f})
    out.sums = {col: _number(v, f"{name}'s {what} sum of {col}") for col, v in sums.items()}
    return out


def parse_trailer(uri: str, tail: bytes, prefix: str) -> Declared | None:
    """What the trailer line ending a file declares (`#rows=1000,sum-amount=12625.00`: after `prefix`, names
    and values split by commas, semicolons or spaces; the names of parse_metadata), or None when the file's
    last line does not start with `prefix` or declares no rows or sums."""
    lines = [ln.strip() for ln in tail.decode("utf-8", "replace").splitlines() if ln.strip()]
    if not lines or not lines[-1].startswith(prefix):
        return None
    pairs = [p for p in re.split(r"[,;\s]+", lines[-1][len(prefix) :]) if p]
    md = dict(p.split("=", 1) for p in pairs if "=" in p)
    # A trailer is part of its file: it cannot state the file's size or checksum, only rows and sums.
    named = {k: v for k, v in md.items() if k.lower() == "rows" or k.lower().startswith(SUM_PREFIXES)}
    return parse_metadata(uri, named, "trailer")


def _listed(names: list[str]) -> str:
    more = f", and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
    return ", ".join(names[:_SHOWN]) + more


class ControlTotalsCheck(Tolerant):
    """The batch's rows, column sums and files against the manifest its producer sent beside the files."""

    check: Literal["control_totals"]
    manifest: str = Field(
        default="_manifest.json",
        min_length=1,
        description="where each file's manifest is: a name in the file's folder, or a path or s3:// URI; {dir}, "
        "{name} and {stem} stand for the file's folder, name and name without its extension "
        f"(the file name is one of {', '.join(MANIFEST_NAMES)} or ends in "
        f"{' or '.join(MANIFEST_SUFFIXES)}, so listings skip it)",
    )
    sums: list[str] | None = Field(
        default=None,
        description="columns whose sums are compared, each declared by the manifest (default: every sum it declares)",
    )
    without_manifest: Literal["block", "warn"] = Field(
        default="block",
        description="a file of the batch whose manifest is not there (or, by declared_in, whose metadata or trailer "
        "declares no rows or sums, or that has no row in control_table): block the run, or warn",
    )
    declared_in: Literal["manifest", "metadata", "table", "trailer"] = Field(
        default="manifest",
        description='where the producer declares its totals: "manifest", a file beside the data (`manifest`); '
        '"metadata", each file\'s own metadata (S3: x-amz-meta-rows, x-amz-meta-sum-<column>, -bytes, -sha256, '
        '-md5; a local file: the same names as user.* extended attributes); "table", a row per file of '
        '`control_table`; "trailer", each file\'s last line (after `trailer`: rows=..., sum-<column>=...)',
    )
    trailer: str = Field(
        default="#",
        min_length=1,
        max_length=1,
        description='with declared_in = "trailer": the character the trailer line starts with; the table\'s '
        "read_options must set the same `comment`, so Spark skips that line rather than read it as a row",
    )
    control_table: str | None = Field(
        default=None,
        description='with declared_in = "table": the table (in the catalog, read on main) where the producer '
        "writes a row per file it sends: `file` (its name or whole URI), any of `rows`, `bytes`, `sha256`, `md5`, "
        "and other numeric columns, each the sum of the table's column of that name over the file",
    )
    wait: str | None = Field(
        default=None,
        description="how long `wap ingest` and `wap watch` hold a landed file whose manifest, or a file its manifest "
        "names, has not landed yet (a duration from when the file landed: 30m, 2h); a delivery's files then go in "
        "one batch. After the wait the files run and the check judges what came; `wap run` never waits",
    )

    description: ClassVar[str] = (
        "Fails when the batch differs from what its producer declared in a manifest beside the files (JSON or "
        "CSV): its rows, column sums, the files it names and their sizes and checksums."
    )
    example: ClassVar[str] = (
        '[[tables."shop.orders".checks]]\ncheck = "control_totals"\nmanifest = "_manifest.json"\nsums = ["amount"]\n'
    )
    computed: ClassVar[tuple[Evidence, ...]] = ("scan",)

    @field_validator("manifest")
    @classmethod
    def _manifest_name(cls, v: str) -> str:
        rest = v
        for p in PLACEHOLDERS:
            rest = rest.replace(p, "")
        if "{" in rest or "}" in rest:
            reason = f"manifest {v!r} has a placeholder other than {{dir}}, {{name}} and {{stem}}"
            raise PydanticCustomError("manifest_pattern", "{reason}", {"reason": reason})
        name = manifest_for(v, "landing/orders-1.csv").rsplit("/", 1)[-1]
        if not is_manifest_name(name):
            reason = (
                f"manifest {v!r} names a file {name!r}: a manifest is named {' or '.join(MANIFEST_NAMES)} or ends in "
                f"{' or '.join(MANIFEST_SUFFIXES)}, so that listings skip it rather than read it as data"
            )
            raise PydanticCustomError("manifest_pattern", "{reason}", {"reason": reason})
        return v

    @field_validator("wait")
    @classmethod
    def _wait(cls, v: str | None) -> str | None:
        if v is None:
            return v
        try:
            seconds = parse_duration(v)
        except ValueError as e:
            raise PydanticCustomError("duration", "{reason}", {"reason": f"wait: {e}"}) from None
        if seconds <= 0:
            raise PydanticCustomError("duration", "{reason}", {"reason": f"wait {v!r} is not a positive duration"})
        return v

    @model_validator(mode="after")
    def _declaration(self) -> ControlTotalsCheck:
        """control_table with declared_in = "table" only; `wait` with a manifest only (the rest lands with the file
        or is the producer's table)."""
        if (self.declared_in == "table") != (self.control_table is not None):
            reason = (
                'declared_in = "table" needs control_table, the table that holds a row per file'
                if self.control_table is None
                else f'control_table {self.control_table!r} is read only with declared_in = "table"'
            )
            raise PydanticCustomError("control_totals_table", "{reason}", {"reason": reason})
        if self.wait is not None and self.declared_in != "manifest":
            why = {
                "metadata": "a file's metadata lands with the file, so there is nothing to wait for",
                "trailer": "a file's trailer lands with the file, so there is nothing to wait for",
            }.get(self.declared_in, "only a manifest is waited for")
            reason = f'wait {self.wait!r} with declared_in = "{self.declared_in}": {why} (leave wait out)'
            raise PydanticCustomError("control_totals_wait", "{reason}", {"reason": reason})
        return self

    def declaration_of(self, uri: str) -> str:
        """Where the totals covering the data file `uri` are declared: its manifest, or the file itself."""
        return manifest_for(self.manifest, uri) if self.declared_in == "manifest" else uri

    def default_name(self) -> str:
        return "control_totals" + (f"(rows, {', '.join(f'sum({s})' for s in self.sums)})" if self.sums else "")

    def columns(self) -> list[str]:
        return list(self.sums or [])

    def validate_on(self, on: Against) -> None:
        from pyspark.sql.types import NumericType

        for name in self.sums or []:
            f = next((f for f in on.df.schema.fields if f.name.lower() == name.lower()), None)
            if f is not None and not isinstance(f.dataType, NumericType):
                raise ConfigError(
                    f"{on.where}: column '{name}' is {f.dataType.simpleString()}, not a number, so it has no sum",
                    hint="name numeric columns in 'sums'",
                )

    def compile(self, mapping: dict[str, str]) -> Rule:
        return self.within("the producer's manifest")

    # --- evaluation -------------------------------------------------------------------------------

    def measure(self, added: DataFrame, c: Compiled, ctx: AuditContext) -> tuple[dict[str, Any], Evidence]:
        delivery = ctx.delivery
        if delivery is None or not delivery.files:
            raise ConfigError(
                f"{self.where(ctx.this_table.dotted if ctx.this_table else None)}: control_totals reads the manifest "
                "beside the run's files, and this batch is not files (a DataFrame given in Python)",
                hint="declare control_totals on tables fed by files (wap run, wap ingest, wap watch)",
            )
        rows = self._control_rows(ctx, delivery) if self.declared_in == "table" else None
        got = self.gathered(c, delivery, added.columns, lambda wanted: self._sums(added, wanted), control_rows=rows)
        return got, "scan"

    def _control_rows(self, ctx: AuditContext, delivery: Delivery) -> list[dict[str, Any]]:
        """The control table's rows naming a file of the batch (by URI or name), read on its main."""
        from pyspark.sql import functions as F

        from wapflow.sql.identifiers import TableName, quote

        assert self.control_table is not None
        where = self.where(ctx.this_table.dotted if ctx.this_table else None)
        if ctx.main_table is None:
            raise ConfigError(f"{where}: control_table {self.control_table} cannot be read in this audit")
        try:
            name = TableName.parse(self.control_table)
            df = ctx.main_table(name)
        except WapError as e:
            raise ConfigError(
                f"{where}: control_table {self.control_table} cannot be read: {e}",
                hint="name a table in the catalog that the producer writes a row per file into",
            ) from None
        fields = {f.name.lower(): f.name for f in df.schema.fields}
        if "file" not in fields:
            raise ConfigError(
                f"{where}: control_table {self.control_table} has no `file` column (it has "
                f"{', '.join(sorted(fields.values()))})",
                hint="the control table holds a row per file: file, and any of rows, bytes, sha256, md5 and sums",
            )
        keys = sorted({k for uri, _ in delivery.files for k in (uri, uri.rpartition("/")[2])})
        picked = df.where(F.col(quote(fields["file"])).isin(keys)).collect()
        return [{k.lower(): v for k, v in r.asDict().items()} for r in picked]

    def gathered(
        self,
        c: Compiled,
        delivery: Delivery,
        columns: list[str],
        sums_of: Callable[[list[str]], dict[str, Any]],
        *,
        control_rows: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """What the verdict compares: the manifests' declarations and the files' facts, and the batch's sums of
        the columns declared (`sums_of`: column -> its sum over the batch, 0 over no rows; Spark in a run).
        `control_rows`: with declared_in = "table", the control table's rows naming the batch's files."""
        if self.declared_in == "table":
            found = self._from_rows(delivery, control_rows or [], columns)
        elif self.declared_in == "manifest":
            found = self._manifests(delivery)
        else:
            found = self._per_file(delivery)
        problems: list[str] = list(found["problems"])
        declared: list[Declared] = found["declared"]
        sums: list[tuple[str, Any, Decimal]] = []
        skipped = False
        if not found["missing"] and not problems:
            problems += self._files(delivery, declared)
            wanted, sum_problems = self._declared_sums(declared, columns)
            problems += sum_problems
            # A quarantine kept rows out of the batch that the producer's sums count: only rows compare then.
            skipped = bool(wanted) and delivery.quarantined > 0
            if wanted and not skipped:
                got = sums_of(list(wanted))
                sums = [(col, got[col], v) for col, v in wanted.items()]
        counted = not found["missing"] and all(d.rows is not None for d in declared)
        return {
            f"{c.key}_ct": {
                "problems": problems,
                "missing": found["missing"],
                "rows": sum(d.rows or 0 for d in declared) if counted else None,
                "sums": sums,
                "sums_skipped": skipped,
                "manifests": [d.uri for d in declared],
            }
        }

    def _manifests(self, delivery: Delivery) -> dict[str, Any]:
        by_manifest: dict[str, list[str]] = {}
        for uri, _size in delivery.files:
            by_manifest.setdefault(self.declaration_of(uri), []).append(uri)
        declared: list[Declared] = []
        missing: list[str] = []
        problems: list[str] = []
        for m in by_manifest:
            try:
                data = delivery.read(m)
            except OSError as e:  # a folder where the manifest should be, a file this user may not read
                problems.append(f"manifest {m} cannot be read: {e.strerror or type(e).__name__}")
                continue
            if data is None:
                missing.append(m)
                continue
            try:
                declared.append(parse_manifest(m, data))
            except ManifestError as e:
                problems.append(f"manifest {m} cannot be read: {e}")
        return {"declared": declared, "missing": missing, "problems": problems}

    def _per_file(self, delivery: Delivery) -> dict[str, Any]:
        """Each file's own declaration, from its metadata or its trailer line; a file declaring nothing is
        `missing`."""
        declared: list[Declared] = []
        missing: list[str] = []
        problems: list[str] = []
        for uri, _size in delivery.files:
            what = "trailer" if self.declared_in == "trailer" else "metadata"
            try:
                if self.declared_in == "trailer":
                    d = parse_trailer(uri, delivery.tail(uri) if delivery.tail else b"", self.trailer)
                else:
                    d = parse_metadata(uri, (delivery.metadata(uri) if delivery.metadata else None) or {})
            except (OSError, WapError) as e:
                problems.append(f"the {what} of {uri} cannot be read: {getattr(e, 'strerror', None) or e}")
                continue
            except ManifestError as e:
                problems.append(f"the {what} of {uri} cannot be read: {e}")
                continue
            if d is None:
                missing.append(uri)
            else:
                declared.append(d)
        return {"declared": declared, "missing": missing, "problems": problems}

    def _from_rows(self, delivery: Delivery, rows: list[dict[str, Any]], columns: list[str]) -> dict[str, Any]:
        """Each file's declaration from its control table row (by URI, else by name); a file without one, or
        named by two rows, is `missing` or a problem. Its sums: the numeric columns the batch has too, or
        those `sums` names (a control table also holds the producer's own figures: a batch number, a time)."""
        summed = {s.lower() for s in self.sums} if self.sums is not None else {c.lower() for c in columns}
        declared: list[Declared] = []
        missing: list[str] = []
        problems: list[str] = []
        for uri, _size in delivery.files:
            name = uri.rpartition("/")[2]
            mine = [r for r in rows if r.get("file") == uri] or [r for r in rows if r.get("file") == name]
            if not mine:
                missing.append(uri)
                continue
            if len(mine) > 1:
                problems.append(f"control_table {self.control_table} has {len(mine)} rows for {name}")
                continue
            row = mine[0]
            where = f"{self.control_table}'s row for {name}"
            try:
                f = _file(name, {k: row.get(k) for k in ("rows", "bytes", *DIGESTS)}, where)
                sums = {
                    k: _number(v, f"{where}: the sum of {k}")
                    for k, v in row.items()
                    if k in summed
                    and k not in _CSV_KEYS
                    and isinstance(v, int | float | Decimal)
                    and not isinstance(v, bool)
                }
            except ManifestError as e:
                problems.append(str(e))
                continue
            declared.append(Declared(uri, rows=f.rows, sums=sums, files={name: f}))
        return {"declared": declared, "missing": missing, "problems": problems}

    def _files(self, delivery: Delivery, declared: list[Declared]) -> list[str]:
        """What the manifests' file lists say against the files that landed in this batch."""
        sizes = dict(delivery.files)
        problems: list[str] = []
        for d in declared:
            if d.files is None:
                continue
            folder = d.uri.rpartition("/")[0]
            mine = [u for u in sizes if self.declaration_of(u) == d.uri]
            named = {f"{folder}/{n}": f for n, f in d.files.items()}
            not_landed = [n for n, _ in sorted(d.files.items()) if f"{folder}/{n}" not in sizes]
            not_named = sorted(u.rpartition("/")[2] for u in mine if u not in named)
            if not_landed:
                problems.append(f"{len(not_landed)} file(s) named in {d.uri} not in this batch: {_listed(not_landed)}")
            if not_named:
                problems.append(f"{len(not_named)} file(s) of this batch not named in {d.uri}: {_listed(not_named)}")
            for uri, f in named.items():
                if uri not in sizes:
                    continue
                name = uri.rpartition("/")[2]
                size = sizes[uri]
                if f.size is not None and size is not None and f.size != size:
                    problems.append(f"{name} is {size} bytes; its manifest declares {f.size}")
                for algo, want in f.digests.items():
                    got = delivery.digest(uri, algo)
                    if got != want:
                        problems.append(f"{name}'s {algo} is {got}; its manifest declares {want}")
        return problems

    def _declared_sums(self, declared: list[Declared], columns: list[str]) -> tuple[dict[str, Decimal], list[str]]:
        """column of the batch -> its declared total over every manifest, and what stops a comparison."""
        names = {c.lower(): c for c in columns}
        wanted = [s.lower() for s in self.sums] if self.sums is not None else None
        keys = sorted({k.lower() for d in declared for k in d.sums}) if wanted is None else wanted
        out: dict[str, Decimal] = {}
        problems: list[str] = []
        for k in keys:
            per = [next((v for n, v in d.sums.items() if n.lower() == k), None) for d in declared]
            without = [d.uri for d, v in zip(declared, per, strict=True) if v is None]
            if without:
                problems.append(f"{_listed(without)} declare(s) no sum of {k}")
                continue
            if k not in names:
                problems.append(
                    f"the manifest declares a sum of {k}, a column the batch does not have"
                    f"{did_you_mean(k, list(names.values()))}"
                )
                continue
            out[names[k]] = sum((v for v in per if v is not None), Decimal(0))
        return out, problems

    def _sums(self, added: DataFrame, columns: list[str]) -> dict[str, Any]:
        from pyspark.sql import functions as F

        from wapflow.sql.identifiers import quote

        row = added.agg(*[F.sum(F.col(quote(col))).alias(f"s{i}") for i, col in enumerate(columns)]).collect()[0]
        return {col: 0 if row[f"s{i}"] is None else row[f"s{i}"] for i, col in enumerate(columns)}

    def verdict(self, c: Compiled, values: dict[str, Any], rows: int, ctx: AuditContext) -> Verdict:
        got = values.get(f"{c.key}_ct") or {}
        quarantined = ctx.delivery.quarantined if ctx.delivery is not None else 0
        missing: list[str] = got.get("missing", [])
        problems: list[str] = list(got.get("problems", []))
        if missing:
            if self.declared_in == "metadata":
                text = f"no rows or sums declared in the metadata of {_listed(missing)}"
            elif self.declared_in == "trailer":
                text = f"no trailer line starting with {self.trailer!r} declaring rows or sums ends {_listed(missing)}"
            elif self.declared_in == "table":
                text = f"no row in control_table {self.control_table} for {_listed(missing)}"
            else:
                text = f"no manifest at {_listed(missing)}"
            if self.without_manifest == "warn" and not problems:
                return Verdict(False, text + " (without_manifest = warn)", 0, warn_only=True)
            return Verdict(False, "; ".join([text, *problems]), 0)
        figures: list[str] = []
        delivered = rows + quarantined
        declared_rows = got.get("rows")
        if declared_rows is not None:
            ok, diff = self.agrees(delivered, declared_rows)
            held = f" ({quarantined} of them quarantined)" if quarantined else ""
            figures.append(_figure("rows", delivered, declared_rows, diff, held))
            if not ok:
                problems.append(figures.pop())
        for col, mine, theirs in got.get("sums", []):
            declared = float(theirs) if isinstance(mine, float) else theirs
            ok, diff = self.agrees(mine, declared)
            figures.append(_figure(f"sum({col})", mine, theirs, diff, ""))
            if not ok:
                problems.append(figures.pop())
        if got.get("sums_skipped"):
            figures.append(f"sums not compared: {quarantined} row(s) were quarantined, and the manifest counts them")
        if declared_rows is None and not got.get("sums") and not problems and not figures:
            problems.append(f"{_listed(got.get('manifests', []))} declare(s) no rows, sums or files to compare")
        if not problems:
            return Verdict(True, "; ".join(figures) or "every file as its manifest names it", 0)
        return Verdict(False, "; ".join([*problems, *figures]), 0)

    def reproduce_sql(self, c: Compiled, src: str) -> str | None:
        from wapflow.sql.identifiers import quote

        sums = "".join(f", sum({quote(c.mapping.get(s, s))})" for s in self.sums or [])
        return f"SELECT count(*){sums} FROM {src}"


def _figure(what: str, mine: Any, theirs: Any, diff: Any, extra: str) -> str:
    if not diff:
        return f"{what} {shown(mine)} = declared{extra}"
    share = f", {display.percent(float(diff) / abs(float(theirs)))}" if theirs else ""
    return f"{what} {shown(mine)}, declared {shown(theirs)} (difference {shown(diff)}{share}){extra}"
