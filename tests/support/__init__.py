"""The tests' support: what the tests that drive gpuctl as a user does (tests/integration, tests/conformance,
tests/emulators, tests/beds, and tests/conftest.py, tests/output_contract.py) need of gpuctl that `gpuctl.api`
does not offer: a pinned tool's path, the sim's daemons, a Kubernetes client as gpuctl makes it, the catalog.

These modules are the only ones those tests reach below `gpuctl.api` through; pyproject.toml's contract "the tests
use gpuctl.api and tests.support" names each import they make, with its reason. One module per gpuctl layer
(tools, model, kube, sim, eks, stack, ops, util), so that a test loads the layers it uses and no more: only the
EKS tests load the EKS provider. Each re-exports gpuctl's own objects (the same function, class or module), so a
test behaves as it did importing them from gpuctl. tests/unit is outside the contract: a unit test tests one
layer's own modules.
"""
