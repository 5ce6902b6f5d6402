"""What keeps a command cheap once typer is loaded: plain values coerced without pydantic.

typer (0.29 on) coerces every value through a pydantic TypeAdapter, and the first one costs ~80 ms of
imports, even for `--kubeconfig` left unset; typer offers no public way around it. `speed_up` gives each
parameter of a command typer built a `process_value` (click's Parameter method, which typer's parameters
override to coerce) that serves an unset value and the value kinds gpuctl declares (str, int, float, bool,
list[str], a `parser=`) directly when the input is one typer would take unchanged, and hands anything else to
typer's own, so errors and edge cases stay typer's. What a parameter declares is read where typer reads it:
the `Annotated[..., typer.Option(...)]` of the command's function (`declared`).
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Callable
from typing import Any

_MISS = object()
_INT = re.compile(r"0|-?[1-9][0-9]{0,17}")
_FLOAT = re.compile(r"-?(0|[1-9][0-9]{0,14})(\.[0-9]{1,15})?")


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


def declared(param: Any) -> tuple[Any, Any]:
    """(annotation without Optional, the typer.Option/typer.Argument info) of a parameter `speed_up` has seen."""
    return getattr(param, "gpuctl_declared", (None, None))


def _declarations(command: Any) -> dict[str, tuple[Any, Any]]:
    try:  # typer keeps the function it wraps (functools.update_wrapper)
        hints = typing.get_type_hints(inspect.unwrap(command.callback), include_extras=True)
    except Exception:  # noqa: BLE001 - no callback, or a name that does not resolve: typer's own coercion
        return {}
    found = {}
    for name, hint in hints.items():
        if typing.get_origin(hint) is not typing.Annotated:
            continue
        annotation, *extras = typing.get_args(hint)
        if typing.get_origin(annotation) in (typing.Union, types.UnionType):
            kept = [a for a in typing.get_args(annotation) if a is not type(None)]
            annotation = kept[0] if len(kept) == 1 else annotation
        info = next((e for e in extras if hasattr(e, "parser")), None)
        if info is not None:
            found[name] = (annotation, info)
    return found


def _fast_for(annotation: Any, info: Any) -> Callable[[Any], Any] | None:
    if info is None:
        return None
    if info.parser is not None:
        parser = info.parser

        def parsed(value: Any) -> Any:
            try:
                return parser(value)
            except Exception:  # noqa: BLE001 - typer's adapter runs it again and words the error
                return _MISS
        return parsed
    if annotation in (int, float) and (info.min is not None or info.max is not None or info.clamp):
        return None
    return _PLAIN.get(annotation)


def speed_up(command: Any, params: list[Any]) -> None:
    """Give each of `params` (of `command`: its own, or with the help option click makes per context) the fast
    `process_value`, once."""
    params = [p for p in params if not hasattr(p, "gpuctl_declared")]
    found = _declarations(command) if params else {}
    for param in params:
        param.gpuctl_declared = found.get(param.name, (None, None))
        param.process_value = _process_value(param, _fast_for(*param.gpuctl_declared), param.process_value)


def _process_value(param: Any, fast: Callable[[Any], Any] | None,
                   typers: Callable[[Any, Any], Any]) -> Callable[[Any, Any], Any]:
    def process_value(ctx: Any, value: Any) -> Any:
        if value is None:  # unset: what typer makes of it, without building its adapter
            result: Any = () if param.multiple or param.nargs == -1 else None
        else:
            result = fast(value) if fast else _MISS
        if result is _MISS or (param.required and param.value_is_missing(result)):
            return typers(ctx, value)
        return result if param.callback is None else param.callback(ctx, param, result)
    return process_value
