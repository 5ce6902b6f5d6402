"""Render the shipped Jinja templates strictly: an undefined name is an error, never ''."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from gpuctl.util.resources import data_dir

if TYPE_CHECKING:
    from jinja2 import Environment


@cache
def _environment(directory: str) -> Environment:
    from jinja2 import Environment, FileSystemLoader, StrictUndefined  # ~50 ms: only when a template renders

    return Environment(
        loader=FileSystemLoader(str(data_dir(directory))),
        undefined=StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # YAML, not HTML: values go through |tojson instead
    )


def render_template(name: str, directory: str = "templates", **values: Any) -> str:
    """Render `directory/name`; interpolate values with `|tojson` in the template."""
    return _environment(directory).get_template(name).render(**values)
