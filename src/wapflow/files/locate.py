"""Where in a local file a record Spark refused is: the line (and CSV column), for the error message.

Only on the failure path, and only for local files up to LOCATE_LIMIT: the file is scanned again in
Python, because Spark's message names the record or value, not its line.
"""

from __future__ import annotations

import codecs
import io
import json
from typing import IO, cast

from wapflow.errors import InputError
from wapflow.files.access import LOCATE_LIMIT, local_path, open_local
from wapflow.files.text_checks import CsvDialect, encoding_of, json_kind, json_line_error, lower_options
from wapflow.storage.files import FileIdentity


def find_line(s: FileIdentity, record: str) -> int | None:
    """The line of a local file equal to Spark's bad record (failure path only; bounded)."""
    local = local_path(s)
    record = record.strip("\r\n")
    if local is None or not record or (s.size or 0) > LOCATE_LIMIT:
        return None
    f = open_local(local)
    if f is None:
        return None
    target = record.encode("utf-8", errors="replace")
    with f:
        for i, raw in enumerate(f, 1):
            line = raw.rstrip(b"\r\n")
            if i == 1 and line.startswith(codecs.BOM_UTF8):
                line = line[len(codecs.BOM_UTF8) :]
            if line == target:
                return i
    return None


def _open_small(s: FileIdentity) -> io.BufferedIOBase | None:
    """The file opened for a scan, when it is local and small enough to scan whole (else None)."""
    local = local_path(s)
    if local is None or (s.size or 0) > LOCATE_LIMIT:
        return None
    return open_local(local)


def find_value(
    s: FileIdentity, fmt: str, field: str | None, value: str, options: dict[str, str]
) -> tuple[int, str | None] | None:
    """(line, column) of the first record holding `value` (in `field`, if known), in a local file."""
    f = _open_small(s)
    if f is None:
        return None
    low = lower_options(options)
    enc = encoding_of(low)
    with f:
        text = io.TextIOWrapper(cast(IO[bytes], f), encoding=enc, errors="replace", newline="")
        if fmt == "json":
            for i, line in enumerate(text, 1):
                try:
                    rec = json.loads(line.lstrip("\ufeff"))
                except ValueError:
                    continue
                if isinstance(rec, dict):
                    for k, v in rec.items():
                        if (field is None or k.lower() == field.lower()) and (v == value or str(v) == value):
                            return i, k
            return None
        d = CsvDialect.from_options(low)
        if not d.checkable:
            return None
        rdr = d.reader(text)
        header = [h.lstrip("\ufeff") for h in next(rdr, [])]
        for row in rdr:
            for j, v in enumerate(row):
                if v == value or (d.strip and v.strip() == value):
                    return rdr.line_num, header[j] if j < len(header) else None
    return None


def json_lines_error(s: FileIdentity) -> InputError | None:
    """The first line of a local JSON lines file that is not a JSON object, scanning the whole file."""
    f = _open_small(s)
    if f is None:
        return None
    with f:
        for i, raw in enumerate(f, 1):
            line = raw.decode("utf-8", errors="replace").lstrip("\ufeff")
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError as e:
                return json_line_error(s, i, line, e)
            if not isinstance(value, dict):
                return InputError(
                    f"line {i} of {s.uri} is {json_kind(value)}, not a JSON object",
                    hint="JSON lines files hold one object per line",
                )
    return None
