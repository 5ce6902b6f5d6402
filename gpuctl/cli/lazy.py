"""What keeps a command cheap once typer is loaded: subcommands built on first use, and plain
values coerced without pydantic.

`gpuctl gpus` needs one command, not all of them: `LazyGroup` imports a command's module and
builds its click command when the command line names it (help and typo suggestions still list
every name). typer 0.29 coerces every value through a pydantic TypeAdapter, and the first one
costs ~80 ms of imports, even for `--kubeconfig` left unset. `install_fast_coercion` serves the
value kinds gpuctl uses (str, int, float, bool, Path, list[str], a `parser=`) directly when the input
is one typer would take unchanged, and hands anything else to typer's own adapter, so errors and
edge cases stay typer's. It replaces typer's private `typer.core.build_runtime_param`: pyproject.toml
admits only the typer releases whose private names tests/unit/test_lazy_imports.py checks.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from typer.core import TyperGroup

_MISS = object()
_INT = re.compile(r"0|-?[1-9][0-9]{0,17}")
_FLOAT = re.compile(r"-?(0|[1-9][0-9]{0,14})(\.[0-9]{1,15})?")


class LazyCommands(MutableMapping[str, Any]):
    """A group's subcommands by name, in listing order, each loaded on first lookup."""

    def __init__(self, names: tuple[str, ...], load: Callable[[str], Any]) -> None:
        self._names = list(names)
        self._load = load
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._loaded:
            if name not in self._names:
                raise KeyError(name)
            self._loaded[name] = self._load(name)
        return self._loaded[name]

    def __setitem__(self, name: str, command: Any) -> None:
        if name not in self._names:
            self._names.append(name)
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        self._names.remove(name)
        self._loaded.pop(name, None)

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._names))

    def __len__(self) -> int:
        return len(self._names)

    def __contains__(self, name: object) -> bool:
        return name in self._names


class LazyGroup(TyperGroup):
    """A TyperGroup whose subcommands `names` are built by `load(name)` when first looked up."""

    names: tuple[str, ...] = ()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.commands = LazyCommands(self.names, self.load)

    def load(self, name: str) -> Any:  # pragma: no cover - subclasses say how
        raise NotImplementedError


def _fast_str(value: Any) -> Any:
    # typer: str(value), then pydantic's str check, which refuses lone surrogates (undecodable argv bytes).
    if isinstance(value, str) and (value.isascii() or _encodes(value)):
        return value
    return _MISS


def _encodes(value: str) -> bool:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _fast_int(value: Any) -> Any:
    if type(value) is int:
        return value
    if isinstance(value, str) and _INT.fullmatch(value):
        return int(value)
    return _MISS


def _fast_float(value: Any) -> Any:
    if type(value) is float:
        return value
    if isinstance(value, str) and _FLOAT.fullmatch(value):
        return float(value)
    return _MISS


def _fast_bool(value: Any) -> Any:
    return value if type(value) is bool else _MISS  # "1" from GPUCTL_DEBUG: typer's own rules


def _fast_str_list(value: Any) -> Any:
    if isinstance(value, (list, tuple)) and all(_fast_str(v) is not _MISS for v in value):
        return list(value)
    return _MISS


_PLAIN: dict[Any, Callable[[Any], Any]] = {str: _fast_str, int: _fast_int, float: _fast_float, bool: _fast_bool,
                                           list[str]: _fast_str_list}


def install_fast_coercion() -> None:
    """Route typer's coercion of plain values around pydantic (a no-op on a typer without it)."""
    try:
        from typer import core
        from typer._coercion import RuntimeParam
        from typer._param_types import coerce_cli_path
    except ImportError:  # a typer whose private names moved: its own coercion, slower (a unit test fails)
        return
    build_original = core.build_runtime_param
    if getattr(build_original, "gpuctl_fast", False):
        return

    @dataclass(frozen=True)
    class FastParam(RuntimeParam):
        """Plain values directly; anything else through the adapter typer would have built."""

        descriptor: Any = None
        fast: Callable[[Any, Any, Any], Any] | None = None
        slow: list[Any] = field(default_factory=list)  # holds the typer RuntimeParam, built on first need

        def _coerce_value(self, value: Any, param: Any, ctx: Any) -> Any:
            result = self.fast(value, param, ctx) if self.fast else _MISS
            if result is not _MISS:
                return result
            if not self.slow:
                self.slow.append(build_original(self.descriptor))
            return self.slow[0]._coerce_value(value, param=param, ctx=ctx)

    def fast_for(descriptor: Any) -> Callable[[Any, Any, Any], Any] | None:
        info = descriptor.parameter_info
        annotation = descriptor.annotation
        if descriptor.file_annotation is not None:
            return None
        if info.parser is not None:
            parser = info.parser

            def parsed(value: Any, param: Any, ctx: Any) -> Any:
                try:
                    return parser(value)
                except Exception:  # noqa: BLE001 - typer's adapter runs it again and words the error
                    return _MISS
            return parsed
        if annotation in (int, float) and (info.min is not None or info.max is not None or info.clamp):
            return None
        if isinstance(annotation, type) and issubclass(annotation, Path):
            path_type = info.path_type or annotation

            def path(value: Any, param: Any, ctx: Any) -> Any:
                if not (isinstance(value, str) and value and "\0" not in value and _fast_str(value) is not _MISS):
                    return _MISS
                return coerce_cli_path(path_type(value), info, path_type=path_type, param=param, ctx=ctx)
            return path
        plain = _PLAIN.get(annotation)
        return None if plain is None else (lambda value, param, ctx: plain(value))

    def build(descriptor: Any) -> Any:
        fast = fast_for(descriptor)
        if fast is None:
            return build_original(descriptor)
        try:
            return FastParam(parameter_info=descriptor.parameter_info, annotation=descriptor.annotation,
                             descriptor=descriptor, fast=fast, slow=[])
        except TypeError:  # a typer whose RuntimeParam changed shape: its own way, only slower
            return build_original(descriptor)

    build.gpuctl_fast = True  # type: ignore[attr-defined]
    build.original = build_original  # type: ignore[attr-defined]  # tests hold the two against each other
    core.build_runtime_param = build
