"""The gpuctl command line: typer commands only, one module per command group.

Nothing here imports a cloud SDK, the Kubernetes client or pyhelm3 at module level, so
`gpuctl --help` stays fast; commands import the core when they run.
"""
