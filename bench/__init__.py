"""gpuctl's benchmarks, one module each, run from the repository root: `.venv/bin/python -m bench.<name>`.

They are clients of gpuctl: they run its CLI as a user does, call `gpuctl.api`, or talk to the cluster as kubectl
would. What `gpuctl.api` does not offer is reached through `bench.support` alone, the one module of bench/ that
an import-linter contract (pyproject.toml) lets import gpuctl's lower layers, each import named there.
"""
