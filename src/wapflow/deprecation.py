"""One owner for renamed names: a name users may still pass (a keyword argument, a wap.toml key) keeps working
for one release with a DeprecationWarning that names its replacement, then goes."""

from __future__ import annotations

import warnings
from typing import TypeVar

_T = TypeVar("_T")


def renamed(new: _T | None, old: _T | None, *, old_name: str, new_name: str, where: str) -> _T | None:
    """The value given under `new_name`, or under the deprecated `old_name` (with a warning); both is an error."""
    if old is None:
        return new
    if new is not None:
        raise TypeError(f"{where}: give {new_name}, not both {new_name} and {old_name} (its deprecated name)")
    warnings.warn(
        f"{where}: {old_name}= is deprecated, use {new_name}= (the same value); {old_name}= goes in the next release",
        DeprecationWarning,
        stacklevel=3,
    )
    return old
