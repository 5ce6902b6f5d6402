"""The gpuctl command line: typer commands only, one module per command group.

Imports sit at the head of each module. Two seams keep start-up light (tests/unit/test_lazy_imports.py,
bench/startup.py): main.py loads only the module of the command a command line names (every one for the root
--help), and a command module reaches the core through the public API, `from gpuctl import api` at its head, which
loads gpuctl/api/__init__.py alone: each `api.<name>` loads its concern's module (gpuctl.api.specs, .tenants, ...)
at its first use. So the spec model, PyYAML and the operations load only for a command that calls them, and only
the concern it calls: none for --help, `gpus`, `mig validate|plan` or `cluster create --help`; no operation for
`cluster create --export-spec`. (A command module importing `from gpuctl.api.tenants import ...` at its head
would load that concern for the root --help, which builds every command.)
"""
