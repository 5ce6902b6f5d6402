"""The gpuctl command line: typer commands only, one module per command group.

Imports sit at the head of each module. Two seams keep start-up light (tests/unit/test_lazy_imports.py,
bench/startup.py): main.py loads only the module of the command a command line names (every one for the root
--help), and a command module reaches the core through the public API, `import gpuctl` at its head, whose names
(gpuctl.api's __all__) load gpuctl.api at the first `gpuctl.<name>` (gpuctl/__init__.py). So gpuctl.api, with
the spec model, PyYAML and the operations, loads only for a command that calls it: not for --help, `gpus`,
`mig validate|plan` or `cluster create --help`. (For mypy, `from gpuctl import api as gpuctl` under
TYPE_CHECKING gives those names their signatures.)
"""
