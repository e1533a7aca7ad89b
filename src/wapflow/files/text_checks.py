"""CSV and JSON files checked in Python before Spark reads them, so that a bad file fails by name.

The first 64 KB (HEAD_BYTES) of each file: text in the declared encoding; for CSV a sound header
(names, delimiter, no duplicates) and one value per column in the rows seen; for JSON lines one
object per line, or one top-level array. Spark then reads in FAILFAST mode, so a malformed record
beyond what was checked fails the write instead of becoming NULLs.
"""

from __future__ import annotations

import codecs
import csv
import io
import json
import re
from dataclasses import dataclass
from typing import Any

from wapflow.errors import InputError
from wapflow.files.access import open_local
from wapflow.storage.files import FileIdentity


def lower_options(options: dict[str, str]) -> dict[str, str]:
    """read_options with lower-case keys: Spark's option names are case-insensitive."""
    return {k.lower(): str(v) for k, v in options.items()}


def option_flag(opts: dict[str, str], key: str, default: bool = False) -> bool:
    """A boolean read option ("true"/"false") of lower_options(), or its default."""
    v = opts.get(key.lower())
    return default if v is None else v.strip().lower() == "true"


def encoding_of(opts: dict[str, str]) -> str:
    """The declared encoding (Spark's `encoding` or `charset` option), UTF-8 by default."""
    return opts.get("encoding") or opts.get("charset") or "utf-8"


_UTF16_BOMS = (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)


def decode_head(s: FileIdentity, head: bytes, complete: bool, opts: dict[str, str], fmt: str) -> str | None:
    """The head as text (BOM stripped), or an InputError saying why it is not text in that encoding."""
    enc = encoding_of(opts)
    try:
        codec = codecs.lookup(enc)
    except LookupError:
        return None  # a charset Python does not know: Spark will say whether it does
    wide = codec.name.startswith(("utf-16", "utf-32"))
    if not wide:
        if head.startswith(_UTF16_BOMS):
            raise InputError(
                f"{s.uri} is UTF-16 encoded (it starts with a UTF-16 byte order mark)",
                hint='set read_options = { encoding = "UTF-16" } for the table in wap.toml, or re-export it as UTF-8',
            )
        if b"\x00" in head:
            raise InputError(
                f"{s.uri} is not a text file (it contains NUL bytes), so it cannot be {fmt.upper()}",
                hint="check that this is the right file; if it is parquet, name it .parquet or set format",
            )
    if codec.name == "utf-8" and head.startswith(codecs.BOM_UTF8):
        head = head[len(codecs.BOM_UTF8) :]
    dec = codecs.getincrementaldecoder(codec.name)()
    try:
        text = dec.decode(head, final=complete)
    except UnicodeDecodeError as e:
        line = head[: e.start].count(b"\n") + 1
        control = sum(1 for b in head[:4096] if b < 9 or 13 < b < 32)
        if control > len(head[:4096]) // 20:
            raise InputError(
                f"{s.uri} is not a text file (binary content at line {line}), so it cannot be {fmt.upper()}",
                hint="check that this is the right file and format",
            ) from None
        bad = head[e.start : e.start + 1].hex()
        if codec.name == "utf-8":
            try:
                head.decode("cp1252")
                guess = (
                    'it looks like a Windows/Excel export: set read_options = { encoding = "windows-1252" } '
                    "for the table in wap.toml, or re-export it as UTF-8"
                )
            except UnicodeDecodeError:
                guess = 'set read_options = { encoding = "..." } to the file\'s encoding, or re-export it as UTF-8'
            raise InputError(
                f"{s.uri} is not valid UTF-8 text (byte 0x{bad} at line {line}): wrong encoding", hint=guess
            ) from None
        raise InputError(
            f"{s.uri} is not valid {enc} text (byte 0x{bad} at line {line})",
            hint="set read_options.encoding to the file's real encoding",
        ) from None
    return text


@dataclass
class CsvDialect:
    """How Spark will split the CSV, from read_options, as Python's csv module can mimic it."""

    sep: str
    quote: str
    escape: str | None
    strip: bool
    multiline: bool
    checkable: bool  # Python's csv can parse it like Spark (one-character delimiter, default line endings)

    @classmethod
    def from_options(cls, opts: dict[str, str]) -> CsvDialect:
        sep = opts.get("sep", opts.get("delimiter", ","))
        sep = {"\\t": "\t", "\\u0001": "\x01"}.get(sep, sep)
        quote = opts.get("quote", '"')
        escape = opts.get("escape", "\\")
        strip = option_flag(opts, "ignoreLeadingWhiteSpace") and option_flag(opts, "ignoreTrailingWhiteSpace")
        checkable = len(sep) == 1 and len(quote) <= 1 and len(escape) <= 1 and "linesep" not in opts
        checkable = checkable and not opts.get("comment")
        return cls(
            sep,
            quote,
            None if (escape == quote or not escape) else escape,
            strip,
            option_flag(opts, "multiLine"),
            checkable,
        )

    def reader(self, lines: Any, *, strict: bool = False) -> Any:
        if self.quote:
            return csv.reader(
                lines, delimiter=self.sep, quotechar=self.quote, escapechar=self.escape, doublequote=True, strict=strict
            )
        return csv.reader(lines, delimiter=self.sep, quoting=csv.QUOTE_NONE, escapechar=self.escape, strict=strict)


_LOOKS_LIKE_DATA = re.compile(r"[-+]?(\d+([.,]\d*)?|\.\d+)([eE][-+]?\d+)?\Z|\d{4}-\d{2}-\d{2}([ T].*)?\Z")
_DELIMS = {";": ";", "\t": "\\t", "|": "|", ",": ","}


@dataclass
class CsvHead:
    """What the check of a CSV head found: the header, and whether the head is the whole file."""

    header: list[str]
    rows: int  # complete data rows seen in the head
    complete: bool  # the head is the whole file


def check_csv_head(s: FileIdentity, text: str, complete: bool, d: CsvDialect) -> CsvHead | None:
    """Header names, delimiter, duplicates, and one value per column in the rows of the head."""
    if not complete:
        cut = text.rfind("\n")
        if cut < 0:
            return None  # a first line longer than the head: leave it to Spark
        text = text[: cut + 1]
    if not text.strip():
        raise InputError(
            f"{s.uri} has no header line (it holds only blank lines)", hint="export the file with a header line"
        )
    rdr = d.reader(io.StringIO(text, newline=""))
    try:
        header = next(rdr)
    except (csv.Error, StopIteration) as e:
        raise InputError(
            f"the header line of {s.uri} cannot be parsed as CSV ({e})", hint="fix or re-export the file"
        ) from None
    if d.strip:
        header = [h.strip() for h in header]
    raw = text.split("\n", 1)[0]
    if len(header) <= 1:
        name = header[0] if header else ""
        counts = {c: name.count(c) for c in _DELIMS if c != d.sep}
        best = max(counts, key=lambda c: counts[c]) if counts else None
        if best is not None and counts[best] > 0:
            shown = _DELIMS[best]
            raise InputError(
                f"{s.uri} does not look {_DELIMS.get(d.sep, d.sep)!r}-delimited: its header is one column "
                f"{name[:80]!r}, which looks {shown!r}-delimited",
                hint=f'set read_options = {{ sep = "{shown}" }} for the table in wap.toml',
            )
    for i, h in enumerate(header, 1):
        if not h.strip():
            raise InputError(
                f"the header of {s.uri} has no name for column {i} (header: {raw[:120]!r})",
                hint="give every column a name in the header line",
            )
        if "\n" in h or "\r" in h:
            raise InputError(
                f"the header of {s.uri} has a line break in the name of column {i} ({h[:40]!r})",
                hint="put every column name on the header line",
            )
        if h != h.strip():
            raise InputError(
                f"the header of {s.uri} has column name {h!r} with spaces around it",
                hint='remove the spaces, or set read_options = { ignoreLeadingWhiteSpace = "true", '
                'ignoreTrailingWhiteSpace = "true" }',
            )
    seen: dict[str, int] = {}
    for i, h in enumerate(header, 1):
        if h.lower() in seen:
            raise InputError(
                f"the header of {s.uri} names column {h!r} twice (columns {seen[h.lower()]} and {i})",
                hint="give every column a distinct name (names are case-insensitive)",
            )
        seen[h.lower()] = i
    if all(_LOOKS_LIKE_DATA.match(h.strip()) for h in header):
        raise InputError(
            f"the first line of {s.uri} looks like data, not a header ({raw[:80]!r})",
            hint="CSV files need a header line with the column names",
        )
    rows = 0
    line_before = rdr.line_num
    try:
        for row in rdr:
            start, line_before = line_before + 1, rdr.line_num
            if not row or (len(row) == 1 and not row[0].strip()):
                continue  # Spark skips blank lines
            if not complete and rdr.line_num == text.count("\n") and d.multiline:
                break  # the head may cut this record
            if not d.multiline and any("\n" in v or "\r" in v for v in row):
                raise quoted_newline_error(s, start)
            if len(row) != len(header):
                raise InputError(
                    f"line {start} of {s.uri} has {len(row)} value(s) but the header has {len(header)} columns"
                    f" ({short(text.splitlines()[start - 1] if start <= text.count(chr(10)) else '')})",
                    hint="fix or re-export the file: every row needs one value per column "
                    "(wapflow never pads short rows with NULLs or drops extra values)",
                )
            rows += 1
    except csv.Error as e:
        raise InputError(
            f"line {rdr.line_num} of {s.uri} cannot be parsed as CSV ({e})", hint="fix or re-export the file"
        ) from None
    return CsvHead(header, rows, complete)


def short(text: str, n: int = 80) -> str:
    """A record or line quoted for a message, cut after n characters."""
    return repr(text if len(text) <= n else text[:n] + "...")


def quoted_newline_error(s: FileIdentity, line: int) -> InputError:
    """A quoted value with a line break, which Spark splits unless multiLine is set."""
    return InputError(
        f"{s.uri} has a quoted value spanning several lines, starting at line {line}",
        hint='set read_options = { multiLine = "true" } for the table in wap.toml (Spark then reads each '
        "file in one piece), or remove the line breaks from the values",
    )


def first_quoted_newline(path: str, d: CsvDialect, encoding: str) -> int | None:
    """The line where a quoted value first spans a line break, scanning the whole local file.

    Vectorised (numpy): chunks without a quote character are only counted; in the others, a line
    with an odd number of quote characters is a candidate, confirmed by parsing it alone (a literal
    quote inside an unquoted value, like 5" screen, is not an opening quote).
    """
    import numpy as np

    try:
        q = d.quote.encode(encoding)
    except (UnicodeEncodeError, LookupError):
        return None
    if len(q) != 1 or codecs.lookup(encoding).name.startswith(("utf-16", "utf-32")):
        return None
    f = open_local(path)
    if f is None:
        return None
    base, carry = 1, b""
    with f:
        while True:
            chunk = f.read(8 << 20)
            if not chunk:
                return None  # what is left has no line break after it
            data = carry + chunk
            cut = data.rfind(b"\n")
            if cut < 0:
                carry = data
                continue
            carry, data = data[cut + 1 :], data[: cut + 1]
            if q in data:
                arr = np.frombuffer(data, dtype=np.uint8)
                newlines = np.flatnonzero(arr == 10)
                line_of_quote = np.searchsorted(newlines, np.flatnonzero(arr == q[0]))
                per_line = np.bincount(line_of_quote, minlength=len(newlines))
                for li in np.flatnonzero(per_line & 1):
                    begin = int(newlines[li - 1]) + 1 if li > 0 else 0
                    line = data[begin : int(newlines[li])].decode(encoding, errors="replace")
                    try:
                        list(d.reader([line + "\n"], strict=True))
                    except csv.Error as e:
                        if "unexpected end of data" in str(e):
                            return base + int(li)
            base += data.count(b"\n")


def check_json_head(s: FileIdentity, text: str, complete: bool, opts: dict[str, str]) -> str:
    """'array' (a top-level JSON array: read with multiLine), 'lines', or an InputError naming the line."""
    body = text.lstrip()
    if not body:
        if complete:
            raise InputError(
                f"{s.uri} holds no JSON records (only whitespace)", hint="remove it or wait until it is written"
            )
        return "lines"
    if body[0] == "[":
        if complete:
            try:
                value = json.loads(body)
            except ValueError as e:
                raise InputError(
                    f"{s.uri} is not valid JSON ({_json_problem(e)})", hint="fix or re-export the file"
                ) from None
            bad = next((i for i, v in enumerate(value) if not isinstance(v, dict)), None)
            if bad is not None:
                raise InputError(
                    f"element {bad + 1} of the JSON array in {s.uri} is {json_kind(value[bad])}, not an object",
                    hint="each element of a top-level array must be an object with the record's fields",
                )
        return "array"
    if option_flag(opts, "multiLine"):
        if complete:
            _one_json_value(s, body)
        return "lines"
    lines = text.split("\n")
    if not complete:
        lines = lines[:-1]
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as e:
            raise json_line_error(s, i, line, e) from None
        if not isinstance(value, dict):
            raise InputError(
                f"line {i} of {s.uri} is {json_kind(value)}, not a JSON object",
                hint="JSON lines files hold one object per line; a file holding one array is read as a whole",
            )
    return "lines"


def _one_json_value(s: FileIdentity, body: str) -> None:
    """multiLine reads one JSON value per file: a second one would be dropped without a word."""
    try:
        _, end = json.JSONDecoder().raw_decode(body)
    except ValueError as e:
        raise InputError(f"{s.uri} is not valid JSON ({_json_problem(e)})", hint="fix or re-export the file") from None
    rest = body[end:].strip()
    if rest:
        line = body[:end].count("\n") + 1
        raise InputError(
            f"{s.uri} holds more than one JSON value (another starts after line {line}), "
            "but multiLine reads only the first",
            hint="remove read_options.multiLine for JSON lines files (one object per line)",
        )


def _json_problem(e: ValueError) -> str:
    if isinstance(e, json.JSONDecodeError):
        return f"{e.msg} at line {e.lineno}, column {e.colno}"
    return str(e)


def json_kind(v: Any) -> str:
    """What a JSON value is, for a message ('an array', 'a string', ...)."""
    return {list: "an array", str: "a string", bool: "a boolean", type(None): "null"}.get(type(v), "a number")


def json_line_error(s: FileIdentity, i: int, line: str, e: ValueError) -> InputError:
    """Line i of a JSON lines file is not JSON: the message guesses why (one document, CSV, truncation)."""
    stripped = line.strip()
    if i == 1 and stripped.startswith("{"):
        return InputError(
            f"{s.uri} is not JSON lines: line 1 is not a complete JSON object ({_json_problem(e)})",
            hint="if the file is one JSON document spread over several lines, "
            'set read_options = { multiLine = "true" }; otherwise fix or re-export it',
        )
    if i == 1 and not stripped.startswith(("{", "[")):
        looks_csv = any(c in stripped for c in ",;\t|")
        return InputError(
            f"{s.uri} is not JSON: line 1 is {short(stripped)}",
            hint='if it is CSV, set format = "csv" for the table in wap.toml (or name it .csv)'
            if looks_csv
            else "check that this is the right file and format",
        )
    return InputError(
        f"line {i} of {s.uri} is not valid JSON ({_json_problem(e)}): {short(stripped)}",
        hint="fix or re-export the file (a truncated last line usually means the file was not fully written)",
    )
