"""The one rule for a value picked from a fixed set (a GPU model, a cloud, a sharing mode, a MIG strategy...):
read without regard to case and turned into its one canonical spelling, the same for a flag and a spec field;
anything else is refused naming the field, with "did you mean" for a near miss or a known other name.

Another name is suggested, never taken: `aws` is not `eks` (a self-managed cluster on EC2 is AWS too), and
`a100` names two GPUs; the error says which value to write."""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar

from gpuctl.util.errors import UsageError, shown

_T = TypeVar("_T")


@dataclass(frozen=True)
class Choice:
    """The values of one kind: `what` names the kind in an error ("GPU", "cloud"), `names` are the canonical
    spellings, `aliases` other names (lower case) and the values each may mean, `listed_by` where a user reads
    the whole list when it is too long for one error line ("gpuctl gpus lists them")."""

    what: str
    names: tuple[str, ...]
    aliases: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    listed_by: str | None = None

    def find(self, text: object) -> str | None:
        """The canonical spelling of `text` (any case), or None where it is none of the names."""
        if not isinstance(text, str):
            return None
        key = text.lower()
        return next((name for name in self.names if name.lower() == key), None)

    def suggest(self, text: object) -> tuple[str, ...]:
        """What a user who wrote `text` may have meant: the values a known other name stands for, else the
        closest name (difflib), else nothing."""
        key = str(text).lower()
        if key in self.aliases:
            return self.aliases[key]
        by_lower = {name.lower(): name for name in self.names}
        return tuple(by_lower[m] for m in difflib.get_close_matches(key, list(by_lower), n=1, cutoff=0.6))

    def hint(self, text: object) -> str:
        """The fix for an unknown `text`: did you mean ..., or the names to choose from."""
        close = self.suggest(text)
        every = f"one of: {', '.join(self.names)}"
        if not close:
            return f"use {every}"
        meant = " or ".join(repr(name) for name in close)
        return f"did you mean {meant}? ({self.listed_by or every})"

    def check(self, text: object, where: str) -> str:
        """The canonical spelling of `text`, or a UsageError naming `where` (a flag or a field path)."""
        found = self.find(text)
        if found is None:
            raise UsageError(where, f"unknown {self.what} {shown(text)}", self.hint(text))
        return found

    def canonical(self, text: _T) -> _T:
        """`text` in its canonical spelling where it is one of the names (any case), else unchanged: for a
        document's first, reading pass, whose values are judged (check) in the validation pass."""
        found = self.find(text)
        return text if found is None else found  # type: ignore[return-value]  # a str where text is one
