"""One lazy seam per heavy third-party module (SkyPilot's sky/adaptors/common.py LazyImport is the model).

A module names what it needs at its head, `yaml = LazyImport("yaml")`, and uses it as before
(`yaml.safe_load(text)`): the import happens at the first attribute access, so a command that never
reaches that line never pays for it (`gpuctl --help`, `gpuctl gpus`: tests/unit/test_lazy_imports.py).
For the real types, pair it with the real import under TYPE_CHECKING:

    if TYPE_CHECKING:
        import yaml
    else:
        yaml = LazyImport("yaml")

A distribution that is not installed is a one-line ToolError (exit 1) naming it and the fix, not a traceback.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

from gpuctl.util.errors import ToolError


class LazyImport:
    """A module-level stand-in for `name` (a module, dotted or not), imported at the first attribute access."""

    def __init__(self, name: str, distribution: str | None = None) -> None:
        self._name = name
        self._distribution = distribution or name.partition(".")[0]
        self._module: ModuleType | None = None

    def load(self) -> ModuleType:
        if self._module is None:
            try:
                self._module = importlib.import_module(self._name)
            except ModuleNotFoundError as exc:
                if exc.name is None or self._name.partition(".")[0] != exc.name.partition(".")[0]:
                    raise  # a module the SDK itself imports: its own error
                raise ToolError(f"the Python package {self._distribution} is not installed (gpuctl needs "
                                f"{self._name})", f"reinstall gpuctl, or pip install {self._distribution}") from None
        return self._module

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__") and attr.endswith("__"):
            raise AttributeError(attr)  # copy, pickle and inspect probe these: they load nothing
        return getattr(self.load(), attr)

    def __repr__(self) -> str:
        state = "loaded" if self._module is not None else "not loaded"
        return f"<LazyImport {self._name!r} ({state})>"
