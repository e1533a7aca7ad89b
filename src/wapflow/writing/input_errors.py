"""Spark's failure to read or parse a run's files, as an InputError naming the file (and line).

Recognised by Spark's error conditions, not by message text; what is storage's, the credentials' or
the network's fault (spark_errors.classify) is never the file's.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from wapflow.errors import InputError
from wapflow.files.locate import find_line, find_value
from wapflow.files.spark_paths import file_for_path, linked_files, unlink_text
from wapflow.files.text_checks import short
from wapflow.spark import errors as spark_errors
from wapflow.spark.chain import walk
from wapflow.storage.files import FileIdentity

# Conditions that only reading or parsing a data source raises.
_PARSE = (
    "MALFORMED_RECORD_IN_PARSING",
    "MALFORMED_CSV_RECORD",
    "INVALID_JSON_RECORD_TYPE",
    "INVALID_JSON_ROOT_FIELD",
    "CANNOT_PARSE_JSON_FIELD",
    "EMPTY_JSON_FIELD_VALUE",
    "MALFORMED_CHARACTER_CODING",
)
_READ_ONLY = (
    "UNABLE_TO_INFER_SCHEMA",
    "CANNOT_MERGE_SCHEMAS",
    "PARQUET_CONVERSION_FAILURE",
    "PARQUET_TYPE_ILLEGAL",
    "PARQUET_TYPE_NOT_RECOGNIZED",
    "PARQUET_TYPE_NOT_SUPPORTED",
)
_COND_RX = re.compile(r"\[([A-Z][A-Z0-9_]*(?:\.[A-Z][A-Z0-9_]*)?)\]")
_FILE_RX = re.compile(r"(?:reading file|Path does not exist:|CSV file:)\s+(\S+?)\.?(?:\s|$)")


@dataclass(frozen=True)
class _Cause:
    """One link of the chain as reading cares about it: Spark's condition (or the one its text names)."""

    cond: str | None
    params: dict[str, str]
    message: str


def _causes(exc: BaseException) -> list[_Cause]:
    """The chain (error_chain.walk), outermost first; a Python exception without a condition object may
    still name one in its text ('[MALFORMED_RECORD_IN_PARSING] ...', as Py4J errors do)."""
    out: list[_Cause] = []
    for link in walk(exc):
        cond = link.condition
        if cond is None and not link.java:
            m = _COND_RX.search(link.message)
            cond = m.group(1) if m else None
        out.append(_Cause(cond, link.parameters, link.message))
    return out


def _first_line(text: str) -> str:
    return next((ln.strip() for ln in text.splitlines() if ln.strip()), "")


def _value_error(causes: list[_Cause]) -> tuple[str | None, str, str | None] | None:
    """(field, value, target type) of a value that did not parse, from whichever condition says it."""
    for c in causes:
        p = c.params
        if c.cond == "CANNOT_PARSE_JSON_FIELD":
            return p.get("fieldName", "").strip("'`") or None, p.get("fieldValue", ""), p.get("dataType", "").strip('"')
        if c.cond and c.cond.endswith("CANNOT_PARSE_STRING_AS_DATATYPE"):
            return (
                p.get("fieldName", "").strip("'`") or None,
                p.get("fieldValue", "").strip("'"),
                p.get("targetType", "").strip('"'),
            )
        if c.cond == "CAST_INVALID_INPUT":
            return None, p.get("expression", "").strip("'"), p.get("targetType", "").strip('"')
        m = re.match(r'For input string: "(.*)"\Z', c.message)
        if m:
            return None, m.group(1), None
    return None


def _clean(text: str) -> str:
    return re.sub(r"\s*SQLSTATE:\s*\w*", "", _COND_RX.sub("", text)).strip(" .")


def _not_the_files_fault(exc: BaseException) -> bool:
    """True when the chain names storage, credentials or the network (by exception class and status):
    a read that failed because S3 denied access, throttled or could not be reached says nothing about
    the file, so it is never an input error, even when Spark wraps it in FAILED_READ_FILE."""
    return spark_errors.classify(exc, doing="reading the source files") is not None


def input_error_from_spark(
    exc: BaseException,
    files: Sequence[FileIdentity],
    *,
    fmt: str | None = None,
    options: dict[str, str] | None = None,
) -> InputError | None:
    """Spark's failure to read or parse the run's files as an InputError naming the file, else None.

    Recognised by Spark's error conditions, not by message text: FAILED_READ_FILE.* (which carries
    the file's path), MALFORMED_RECORD_IN_PARSING.*, MALFORMED_CSV_RECORD, CANNOT_PARSE_JSON_FIELD,
    INVALID_JSON_RECORD_TYPE, UNABLE_TO_INFER_SCHEMA, PATH_NOT_FOUND, parquet conversion errors and
    Spark's CSV header check. A failure naming a file that is not one of `files` (a warehouse
    file; AccessDenied on the lake) is not an input error: None, as is anything else. Link paths are
    mapped back to the real files; for local files the line (and CSV column) of the bad record is
    looked up. `fmt` and `options` (the table's read_options) make the message precise.
    """
    causes = _causes(exc)
    if not causes or _not_the_files_fault(exc):
        return None
    text = "\n".join(c.message for c in causes)
    read = next((c for c in causes if c.cond and c.cond.startswith("FAILED_READ_FILE")), None)
    parse = next((c for c in causes if c.cond and c.cond.split(".")[0] in _PARSE), None)
    header = next((c for c in causes if "CSV header does not conform to the schema" in c.message), None)
    other = next((c for c in causes if c.cond and c.cond.split(".")[0] in _READ_ONLY), None)
    missing = next((c for c in causes if c.cond == "PATH_NOT_FOUND"), None)
    if not (read or parse or header or other or missing):
        return None
    path = None
    for c in (read, missing):
        if c is not None:
            path = c.params.get("path") or next(iter(_FILE_RX.findall(c.message)), None)
            if path:
                break
    src = file_for_path(path, files) if path else None
    if path and src is None and (read or missing):
        return None  # a file Spark failed to read that is not one of this run's files
    if src is None:
        named = {id(s): s for s in files if s.uri in text}
        named.update((id(s), s) for s in linked_files(text, files))
        src = next(iter(named.values())) if len(named) == 1 else None
    fmt = (fmt or "").lower()
    kind = fmt.upper() or "input"
    target = src if src is not None else (files[0] if len(files) == 1 else None)
    if target is not None:
        which = target.uri
    else:
        which = (
            f"one of the {len(files)} {kind} files ("
            + ", ".join(s.uri for s in files[:3])
            + (", ..." if len(files) > 3 else "")
            + ")"
        )
    root = next((c for c in reversed(causes) if _first_line(c.message)), causes[-1])
    detail = _clean(unlink_text(_first_line(root.message), files))
    fix = "fix or re-export the file; nothing was published"
    if header is not None:
        msg = _clean(unlink_text(header.params.get("msg", header.message), files)).replace("\n", " ")
        return InputError(f"the CSV header of {which} does not match the columns read ({msg})", hint=fix)
    value = _value_error(causes)
    if value is not None:
        field, val, typ = value
        found = (
            find_value(target, fmt, field, val, options or {})
            if target is not None and fmt in ("csv", "json")
            else None
        )
        at = f" at line {found[0]}" if found else ""
        field = field or (found[1] if found else None)
        col = f" in column {field!r}" if field else ""
        as_type = f", which is not a valid {typ.lower()}" if typ else ""
        return InputError(
            f"could not parse {which} as {kind}: value {val!r}{col}{at}{as_type} ({detail})",
            hint="fix the value in the file, or change the column's type in the table; nothing was published",
        )
    if parse is not None:
        csv_rec = next((c for c in causes if c.cond == "MALFORMED_CSV_RECORD"), None)
        record = (csv_rec.params.get("badRecord") if csv_rec else None) or parse.params.get("badRecord") or ""
        raw = bool(record) and not record.startswith("[") and record != "_corrupt_record"
        line = find_line(target, record) if (target is not None and raw) else None
        at = f" at line {line}" if line else ""
        if csv_rec is not None:
            return InputError(
                f"{which} has a malformed CSV record{at}: {short(record)} (not one value per header column)",
                hint="fix or re-export the file: every row needs one value per header column; a quoted value "
                'with a line break needs read_options = { multiLine = "true" }',
            )
        if parse.cond == "INVALID_JSON_RECORD_TYPE":
            return InputError(
                f"{which} has a JSON record that is not an object{at}", hint="JSON lines files hold one object per line"
            )
        shown = f": {short(record)}" if raw else ""
        return InputError(f"could not parse {which} as {kind}{at}{shown} ({detail})", hint=fix)
    if missing is not None and read is None:
        return InputError(
            f"source file {which} disappeared before Spark read it", hint="run again once the file is back"
        )
    if read is not None and read.cond and read.cond.endswith("CANNOT_READ_FILE_FOOTER"):
        return InputError(
            f"{which} is not a valid parquet file (Spark cannot read its footer)",
            hint="re-export or re-upload the file",
        )
    if other is not None and other.cond == "UNABLE_TO_INFER_SCHEMA":
        return InputError(
            f"Spark found no data in {which} ({kind})", hint="check that the files hold data in the declared format"
        )
    return InputError(
        f"could not read {which} as {kind}: {detail}",
        hint="check that the file is complete and in the declared format; nothing was published",
    )
