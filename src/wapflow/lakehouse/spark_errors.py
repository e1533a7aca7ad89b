"""Turn JVM exception chains into one readable line: the outermost Spark error and its root cause."""

from __future__ import annotations

import re

_PKG = re.compile(r"\b(?:[a-z_][a-z0-9_]*\.)+([A-Z][A-Za-z0-9_$]*(?:Exception|Error))")
_NOISE = ("An error occurred while calling", "Job aborted due to stage failure")


def _short(text: str) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return _PKG.sub(r"\1", line)[:400]


def chain(e: BaseException) -> list[str]:
    """Messages of the exception and its causes, outermost first (Py4J or plain Python)."""
    out: list[str] = []
    java = getattr(e, "java_exception", None)
    if java is not None:
        j, depth = java, 0
        while j is not None and depth < 12:
            try:
                out.append(str(j.toString()))
                j = j.getCause()
            except Exception:  # noqa: BLE001 - a dead gateway must not hide the original error
                break
            depth += 1
    text = str(e).strip()
    if text:
        out.append(text)
    return out


def describe(e: BaseException) -> str:
    msgs = [m for m in chain(e) if m.strip()]
    useful = [_short(m) for m in msgs if not any(n in m.splitlines()[0] for n in _NOISE)]
    useful = [u for i, u in enumerate(useful) if u and u not in useful[:i]]
    if not useful:
        return _short(msgs[0]) if msgs else type(e).__name__
    if len(useful) == 1:
        return useful[0]
    return f"{useful[0]} (cause: {useful[-1] if useful[-1] != useful[0] else useful[1]})"


def full_text(e: BaseException) -> str:
    return "\n".join(chain(e))
