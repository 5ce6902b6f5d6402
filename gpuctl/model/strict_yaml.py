"""Bounded, strict reading of the YAML a user hands over (spec files, kubeconfigs).

A file is read only if it is a regular file no larger than the cap, and only as UTF-8. The YAML
is composed with aliases refused (an alias bomb is refused at its first `*`), nesting bounded and
duplicate keys refused (YAML says keys are unique; PyYAML would keep the last). Scalars resolve
as in YAML 1.2's core schema: `yes`, `on`, `0x10`, `1_000` and `1:20` stay strings, so a field
that wants a number or a boolean says so instead of taking a surprise value. An integer of more
than naming.MAX_DIGITS digits is refused at its line, or, where `long_numbers` asks for it (spec files),
read as a naming.Huge, so the field's validator names the field and its bound.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from gpuctl.model.naming import MAX_DIGITS, Huge
from gpuctl.util.errors import UsageError

MAX_BYTES = 1 << 20
MAX_DEPTH = 32


class _Refused(yaml.YAMLError):
    def __init__(self, problem: str, mark: Any) -> None:
        super().__init__(problem)
        self.problem, self.problem_mark = problem, mark


class _StrictLoader(yaml.SafeLoader):
    depth = 0
    long_numbers = False

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            raise _Refused("aliases (*name) are not accepted", self.peek_event().start_mark)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _Refused(f"nesting deeper than {MAX_DEPTH} levels", self.peek_event().start_mark)
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            try:
                duplicate = key in seen
            except TypeError:
                raise _Refused("a mapping key must be a plain value", key_node.start_mark) from None
            if duplicate:
                raise _Refused(f"duplicate key {str(key)[:40]!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)

    def construct_yaml_int(self, node: Any) -> Any:
        text = str(node.value).replace("_", "")
        digits = text.lstrip("+-")
        if digits.isascii() and digits.isdigit() and not digits.startswith("0") and len(digits) > MAX_DIGITS:
            if not self.long_numbers:
                raise _Refused(f"a number of {len(digits)} digits (at most {MAX_DIGITS})", node.start_mark)
            return Huge(len(digits), text.startswith("-"))
        try:
            return super().construct_yaml_int(node)
        except ValueError:  # an explicitly tagged `!!int` Python cannot convert
            raise _Refused(f"{text[:40]!r} is not an integer gpuctl can read", node.start_mark) from None


class _LongNumbersLoader(_StrictLoader):
    long_numbers = True


_StrictLoader.add_constructor("tag:yaml.org,2002:int", _StrictLoader.construct_yaml_int)

# YAML 1.2 core schema for the implicit types; everything else is a string.
_StrictLoader.yaml_implicit_resolvers = {}
for _tag, _pattern, _first in (
        ("null", r"~|null|Null|NULL|", ["~", "n", "N", ""]),
        ("bool", r"true|True|TRUE|false|False|FALSE", list("tTfF")),
        ("int", r"[-+]?(0|[1-9][0-9]*)", list("-+0123456789")),
        ("float", r"[-+]?(\.[0-9]+|[0-9]+\.[0-9]*)([eE][-+]?[0-9]+)?", list("-+.0123456789"))):
    _StrictLoader.add_implicit_resolver(f"tag:yaml.org,2002:{_tag}", re.compile(f"^(?:{_pattern})$"), _first)


def loads(text: str, source: str, field: str, long_numbers: bool = False) -> Any:
    """Parse `text` strictly; errors name `field` and `source` with the line. With `long_numbers`, an
    integer of more than MAX_DIGITS digits is a Huge (for a validator to refuse), else an error here."""
    loader = _LongNumbersLoader if long_numbers else _StrictLoader
    try:
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = " ".join(filter(None, (getattr(exc, "context", None), getattr(exc, "problem", None)))) \
            or "invalid YAML"
        raise UsageError(field, f"{source}{where}: {problem}", "fix the file") from None
    except RecursionError:
        raise UsageError(field, f"{source}: nesting too deep", "fix the file") from None


def read_text(path: Path, field: str, max_bytes: int = MAX_BYTES) -> str:
    """The text of a regular file of at most `max_bytes`, decoded as UTF-8."""
    try:
        # O_NONBLOCK: opening a FIFO must not wait for a writer before the type check refuses it
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            os.close(fd)
            raise UsageError(field, f"{path} is not a regular file", "pass a file")
        with os.fdopen(fd, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise UsageError(field, f"cannot read {path}: {exc.strerror}", "pass a readable file") from None
    if len(data) > max_bytes:
        raise UsageError(field, f"{path} is larger than {max_bytes // 1024} KiB", "pass a smaller file")
    try:
        return data.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as exc:
        raise UsageError(field, f"{path} is not UTF-8 (byte {exc.start})", "save the file as UTF-8") from None


def read_yaml(path: Path, field: str, max_bytes: int = MAX_BYTES, long_numbers: bool = False) -> Any:
    """Read and strictly parse one YAML document from a user's file (`long_numbers`: see loads)."""
    return loads(read_text(path, field, max_bytes), str(path), field, long_numbers)
