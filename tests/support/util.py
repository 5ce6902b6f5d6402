"""gpuctl's utilities, for the tests: its errors and exit codes, its cache and data directories, its deadlines."""

from __future__ import annotations

from gpuctl.util.errors import ExitCode, GpuctlError, RequestTimeout, ToolError, UsageError
from gpuctl.util.paths import cache_dir
from gpuctl.util.resources import data_dir
from gpuctl.util.timeouts import CONNECT_S, READ_S

__all__ = ["CONNECT_S", "READ_S", "ExitCode", "GpuctlError", "RequestTimeout", "ToolError", "UsageError",
           "cache_dir", "data_dir"]
