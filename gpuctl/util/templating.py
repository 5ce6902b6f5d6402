"""Render the shipped Jinja templates strictly: an undefined name is an error, never ''."""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING, Any

from gpuctl.util.lazy_import import LazyImport
from gpuctl.util.resources import data_dir

if TYPE_CHECKING:
    import jinja2
else:
    jinja2 = LazyImport("jinja2")  # ~50 ms: only when a template renders


@cache
def _environment(directory: str) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(data_dir(directory))),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        autoescape=False,  # YAML, not HTML: values go through |tojson instead
    )


def render_template(name: str, directory: str = "templates", **values: Any) -> str:
    """Render `directory/name`; interpolate values with `|tojson` in the template."""
    return _environment(directory).get_template(name).render(**values)
