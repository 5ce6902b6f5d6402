"""No check in tests/ passes by having nothing to check (issue 30): a `for` loop that asserts over each item of
runtime data (nodes read from the cluster, a command's JSON, a parsed file) checks nothing when the data is
empty, and `all(...)` over an empty sequence is True, as is `not any(...)`.

The scan finds each `for` loop whose body asserts (and neither breaks nor returns: a search has its own failure)
and each `assert all(...)` / `assert not any(...)`, and asks of the data it iterates: is it literal (a display, a
constant, range(3), an UPPER_CASE module constant, a name bound only to a non-empty display or a comprehension
over literal data), or does an earlier assert of the same function name it (`assert len(nodes) == 3`,
`assert sorted(names) == [...]`, `assert checks and all(...)`)? Anything else must be listed in ALLOWED with
the reason it cannot be empty or why empty is the right answer (an absence). Branches (`if` without `else`) are
reviewed by reading, not scanned: test_tenant_fence's removal with the last tenant no longer hangs on one."""

from __future__ import annotations

import ast
import textwrap
from collections.abc import Iterator
from pathlib import Path

from tests.unit.allow_list import assert_listed

TESTS = Path(__file__).resolve().parents[1]
_WRAPPERS = {"sorted", "list", "set", "tuple", "enumerate", "reversed", "zip", "iter", "frozenset"}
_VIEWS = {"items", "values", "keys", "splitlines"}  # empty only when the receiver is
_OPAQUE = "<call>"  # a value no earlier assert can name: a function's answer read in the loop's own line

# (file under tests/, the line of the loop or assert, stripped): why it cannot pass with nothing checked
ALLOWED: dict[tuple[str, str], str] = {
    ("conformance/test_promql_engine.py",
     "assert all(answers[q] for q in queries())  # each finds series in dcgm-exporter's shape"):
        "queries() always holds pods_now, pods_over and coverage (a literal tuple of builders)",
    ("integration/test_dra_agent_real_chart.py", "for item in items:"):
        "slices() builds the node -> slice map; its callers compare the keys to the expected GPU nodes",
    ("integration/test_dra_agent_real_chart.py", "for node, p in plugin_pods(cluster).items():"):
        "plugin_pods(cluster) is asserted == GPU_NODES two lines above (this is a second LIST)",
    ("integration/test_concurrent_apply.py", "for which, proc in procs.items():"):
        "one process per entry of the literal SPECS (files is filled from SPECS just before)",
    ("integration/test_frozen_apiserver.py", "for label, (code, took, stderr) in results.items():"):
        "results gets one entry per command of the literal `commands` (or the test fails with pytest.fail)",
    ("integration/test_openstack.py",
     'assert not any(c.name == "broken" for c in emulator.magnum.clusters.values())'):
        "an absence: the emulator holding no cluster named 'broken' after delete is what is asserted",
    ("integration/test_openstack_bed.py", 'assert all(c["uuid"] != uuid for c in bed.clusters())'):
        "an absence: the bed holding no record of the deleted cluster is what is asserted",
    ("integration/test_sim_dra.py", 'for item in data["items"]:'):
        "slices() builds the node -> slice map; its callers compare the keys to the expected GPU nodes",
    ("integration/test_top_advise.py",
     'assert all(a["nodegroup"] != "slices" for a in listed if "nodegroup" in a), listed'):
        "listed is one advise run's answer, returned by wait_for only once it holds the share-idle-gpus advice",
    ("integration/test_workload_admission.py",
     "for prefix, placed in until(\"every workload's pod scheduled\", scheduled).items():"):
        "until() returns only a map with one pod for each of the four prefixes (len(found) == len(names))",
    ("unit/test_catalog.py", "for t in model.instance_types:"):
        "parametrized only over the GPUs whose instance_types is non-empty",
    ("unit/test_dcgm_series.py", "assert all(set(s.labels) == GPU_LABELS for s in samples)"):
        "the next line asserts samples' GPU_UTIL series of both GPUs ({'0': 0, '1': 55})",
    ("unit/test_gobuild_patches.py", "for old, new in table:"):
        "a rule for each patch of gpuctl's own tables; a table with no patch has no line to break it",
    ("unit/test_group_records.py", "for g in made.groups:"):
        "builds `recorded` for with_recorded; `[group] = kept.groups` and its asserts follow",
    ("unit/test_help_pages.py", "for column in _option_lines(text):"):
        "a rule for each option line of a page; test_cluster_create_groups_its_flags_in_panels and "
        "`seen == set(CHOICE_FLAGS)` fail if _option_lines finds none",
    ("unit/test_help_pages.py", "for path, text in helps.items():"):
        "helps holds every command (test_every_command_has_a_help_page: >= 28); the choices rule ends with "
        "`seen == set(CHOICE_FLAGS)`",
    ("unit/test_help_pages.py", "for flag in set(flags) & set(CHOICE_FLAGS):"):
        "the flags of one option line that take a choice; `seen == set(CHOICE_FLAGS)` after the loop",
    ("unit/test_help_pages.py", "for choice in choices:"):
        "choices ends with a literal Choice('AMI type', AMI_TYPES): never empty",
    ("unit/test_hostile_inputs.py", "for old, new in replace.items():"):
        "spec_text's own check that each replacement applies; no replacement is the unchanged spec",
    ("unit/test_inputs_every_flag.py", "for command, leaf in leaf_commands():"):
        "builds the parameter list; an empty parametrize is a skip, and a skip fails the run (tests/conftest.py)",
    ("unit/test_inputs_every_flag.py", "for param in params:"):
        "a rule for each value-taking parameter of each command; set(leaves) == set(BASE) is asserted first",
    ("unit/test_karpenter_objects.py", "for per_node in sorted({t.gpus for t in model.instance_types}):"):
        "parametrized only over the GPUs whose instance_types is non-empty",
    ("unit/test_lazy_imports.py", "for param in cmd.params:"):
        "counted: `assert fast > 50 and checked > 500` after the walk",
    ("unit/test_lazy_imports.py", 'for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):'):
        "the assert inside is a type guard; the check is `found == []` over gpuctl, tests and bench",
    ("unit/test_lazy_imports.py", "for name in names:"):
        "the assert inside is a type guard; the check is `found == []` over gpuctl, tests and bench",
    ("unit/test_mig.py", "for combo in combinations_with_replacement(names, size):"):
        "the profiles of a MIG GPU of the catalog (test_catalog checks each has its profiles)",
    ("unit/test_render_manifests.py", "for doc in docs:"):
        "_documents checks each document and returns them; its callers assert on the kinds they expect",
    ("unit/test_sim_dra.py", "for profile in model.mig.profiles if model.mig else ():"):
        "per GPU of the catalog: a GPU without MIG has no profile to check",
}


def _subjects(expr: ast.expr, literal: set[str]) -> set[str]:
    """Names whose emptiness decides whether iterating over expr checks anything; empty for literal data."""
    if isinstance(expr, ast.List | ast.Tuple | ast.Set | ast.Dict | ast.Constant):
        return set()
    if isinstance(expr, ast.Name):
        return set() if expr.id.isupper() or expr.id in literal else {expr.id}
    if isinstance(expr, ast.Attribute | ast.Subscript | ast.Starred):
        return _subjects(expr.value, literal)
    if isinstance(expr, ast.BinOp) and isinstance(expr.op, ast.Add):
        sides = [_subjects(expr.left, literal), _subjects(expr.right, literal)]
        return set() if set() in sides else sides[0] | sides[1]
    if isinstance(expr, ast.Call):
        func = expr.func
        if isinstance(func, ast.Name) and func.id == "range" and all(isinstance(a, ast.Constant) for a in expr.args):
            return set()
        if isinstance(func, ast.Name) and func.id in _WRAPPERS:
            return set().union(*(_subjects(a, literal) for a in expr.args))
        if isinstance(func, ast.Attribute) and func.attr in _VIEWS and not expr.args:
            return _subjects(func.value, literal)
    return {_OPAQUE}


def _own_nodes(scope: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function (or module) without those of the functions and classes defined in it."""
    for child in ast.iter_child_nodes(scope):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            continue
        yield child
        yield from _own_nodes(child)


def _names(node: ast.AST) -> list[str]:
    return [n.id for n in ast.walk(node) if isinstance(n, ast.Name)]


def _literal_names(nodes: list[ast.AST]) -> set[str]:
    """Names that every assignment of the scope binds to literal data: a non-empty display, or a comprehension
    without a filter over literal data (`procs = {w: start(w) for w in SPECS}`)."""
    bound: dict[str, bool] = {}
    for node in nodes:
        if isinstance(node, ast.Assign):
            value = node.value
            if isinstance(value, ast.List | ast.Tuple | ast.Set):
                literal = bool(value.elts)
            elif isinstance(value, ast.Dict):
                literal = bool(value.keys)
            elif isinstance(value, ast.ListComp | ast.SetComp | ast.DictComp | ast.GeneratorExp):
                literal = all(not g.ifs and not _subjects(g.iter, set()) for g in value.generators)
            else:
                literal = False
            for target in node.targets:
                for name in _names(target):
                    bound[name] = bound.get(name, True) and literal
    return {name for name, literal in bound.items() if literal}


def _quantified(test: ast.expr) -> Iterator[tuple[ast.Call, ast.expr]]:
    """(the call, the data it runs over) for each `all(...)` and `not any(...)` in an assert's test."""
    for node in ast.walk(test):
        negated = isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)
        call = node.operand if isinstance(node, ast.UnaryOp) and negated else node
        if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and len(call.args) == 1 and (
                call.func.id == ("any" if negated else "all")):
            arg = call.args[0]
            yield call, arg.generators[0].iter if isinstance(arg, ast.GeneratorExp | ast.ListComp | ast.SetComp) else arg


def _shown(names: set[str], line: int, beside: list[str], asserts: list[ast.Assert]) -> bool:
    """Each name is asserted on before `line`, or beside the quantifier in its own assert."""
    return all(name != _OPAQUE and (name in beside or any(
        a.lineno < line and name in _names(a.test) for a in asserts)) for name in names)


def unchecked(source: str) -> list[tuple[int, str]]:
    """(line, stripped source line) of each loop or quantifier over data no earlier assert shows non-empty."""
    tree = ast.parse(source)
    lines = source.splitlines()
    found: set[tuple[int, str]] = set()
    for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef))]:
        nodes = list(_own_nodes(scope))
        asserts = [n for n in nodes if isinstance(n, ast.Assert)]
        literal = _literal_names(nodes)
        for node in nodes:
            if isinstance(node, ast.For | ast.AsyncFor):
                body = [n for statement in node.body for n in [statement, *_own_nodes(statement)]]
                if node.orelse or not any(isinstance(n, ast.Assert) for n in body) or \
                        any(isinstance(n, ast.Break | ast.Return) for n in body):
                    continue  # no check in it, or a search (its failure is after the loop)
                if not _shown(_subjects(node.iter, literal), node.lineno, [], asserts):
                    found.add((node.lineno, lines[node.lineno - 1].strip()))
            elif isinstance(node, ast.Assert):
                for call, data in _quantified(node.test):
                    beside = _names(node.test)
                    for name in _names(call):
                        beside.remove(name)
                    if not _shown(_subjects(data, literal), node.lineno, beside, asserts):
                        found.add((node.lineno, lines[node.lineno - 1].strip()))
    return sorted(found)


def scan(root: Path) -> dict[tuple[str, str], int]:
    """(file under root, stripped line) -> line number of each site unchecked() finds in root's Python files."""
    return {(str(path.relative_to(root)), line): number
            for path in sorted(root.rglob("*.py"))
            for number, line in unchecked(path.read_text())}


def test_every_loop_and_quantifier_over_runtime_data_is_shown_non_empty() -> None:
    found = scan(TESTS)
    assert_listed(found, ALLOWED, "a check that passes when its data is empty: assert the data's size or members "
                                  "before it (or list it in ALLOWED with why it cannot be empty)")


def test_the_scan_tells_a_checked_loop_from_a_vacuous_one(tmp_path: Path) -> None:
    """A new unchecked site in a suite laid out as tests/ is found, and is not in ALLOWED: the guard fails on it."""
    (tmp_path / "integration").mkdir()
    (tmp_path / "integration" / "test_x.py").write_text(textwrap.dedent("""\
        def test_vacuous(v1):
            nodes = v1.list_node().items
            for node in nodes:
                assert node.ready
            assert all(n.ready for n in v1.list_node().items)
            assert not any(p.failed for p in pods(v1))
            assert set(ids) == {1} and all(c.ok for c in checks)
        def test_checked(v1):
            nodes = v1.list_node().items
            assert [n.name for n in nodes] == ["gpu-0", "gpu-1"]
            for node in nodes:
                assert node.ready
            checks = result()["checks"]
            assert checks and all(c["ok"] for c in checks)
            assert len(devices) == 24 and all(d.mig for d in devices)
        def test_literal():
            for case, code in {"a": 1, "b": 2}.items():
                assert run(case) == code
            procs = {w: start(w) for w in SPECS}
            for which, proc in procs.items():
                assert proc.wait() == 0
            for _ in range(3):
                assert ping()
            assert all(x for x in [1, 2])
        def test_search(pods):
            for pod in pods:
                if pod.ready:
                    break
            else:
                raise AssertionError("none ready")
            for pod in pods:
                log(pod)
        """))
    found = scan(tmp_path)
    assert found == {("integration/test_x.py", "for node in nodes:"): 3,
                     ("integration/test_x.py", "assert all(n.ready for n in v1.list_node().items)"): 5,
                     ("integration/test_x.py", "assert not any(p.failed for p in pods(v1))"): 6,
                     ("integration/test_x.py", "assert set(ids) == {1} and all(c.ok for c in checks)"): 7}
    assert not set(found) & set(ALLOWED)
