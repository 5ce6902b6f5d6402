"""No fixed sleep stands in for a decision in tests/ (issue 30): a test that proves an absence waits for the
component's own decision (Kueue's QuotaReserved=False and its message, Karpenter's FailedScheduling event for a
pool limit, a pass of the sim's operator) and asserts on it; on a slow machine a sleep passes without the
component having decided anything, and one used to synchronise goes red.

`time.sleep(` is allowed inside a loop that checks a condition (a `while`, or a `for` that breaks, returns or
asserts: a poll with a deadline); anywhere else only at a site listed in ALLOWED with its reason."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.unit.allow_list import assert_listed

TESTS = Path(__file__).resolve().parents[1]

# (file under tests/, the call's source line stripped): why a fixed pause is right there
ALLOWED: dict[tuple[str, str], str] = {
    ("integration/test_sim_faults.py", "time.sleep(FREEZE_S)"):
        "the fault itself: the kube-apiserver stays frozen (SIGSTOP) this long, then is continued",
    ("integration/test_sim_faults.py", "time.sleep(1)  # the apply reads the node's state now"):
        "lets the apply, seen in its MIG wait, make its next request before the freeze; the apply shows no "
        "progress a test could read without a terminal, and a request it starts during the freeze fails its "
        "10 s handshake by design (see the test's docstring)",
    ("integration/test_karpenter.py",
     "time.sleep(2)  # Karpenter's nodeoverlay controller re-evaluates the pool's instance types"):
        "Karpenter's nodeoverlay controller (pkg/controllers/nodeoverlay/controller.go Reconcile) rebuilds its "
        "instance-type store when an overlay is deleted without a log line, event or status to wait for; the "
        "test then fails (one NodeClaim sized for 4) rather than passing without a decision",
    ("unit/test_faults.py", "time.sleep(0.3)"):
        "gives the live progress line's ticker time to redraw between two updates; what is asserted is the text "
        "it drew, and a slow machine draws it later, not differently",
    ("beds/openstack/driver.py", "time.sleep(DELAY_S)"):
        "the test bed's simulated cloud latency (an operation that takes time), not a wait for a decision",
    ("emulators/openstack/magnum.py",
     "time.sleep(max(0.0, MIN_PROGRESS_S - (time.monotonic() - started)))"):
        "the Magnum emulator keeps a stack *_IN_PROGRESS for a minimum time, as Heat does, so that gpuctl's "
        "poll sees the state; emulated latency, not a wait for a decision",
}


def _checks_a_condition(loop: ast.For | ast.AsyncFor | ast.While) -> bool:
    if isinstance(loop, ast.While):
        return True
    return any(isinstance(n, ast.Break | ast.Return | ast.Assert | ast.Raise) for n in ast.walk(loop))


def _is_time_sleep(node: ast.AST) -> bool:
    return isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "sleep" \
        and isinstance(node.func.value, ast.Name) and node.func.value.id == "time"


def fixed_sleeps(source: str) -> list[tuple[int, str]]:
    """(line, stripped source line) of each time.sleep( call not inside a loop that checks a condition."""
    tree = ast.parse(source)
    lines = source.splitlines()
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST, polled: bool) -> None:
        if _is_time_sleep(node) and not polled:
            found.append((node.lineno, lines[node.lineno - 1].strip()))  # type: ignore[attr-defined]  # a Call: an expr
        if isinstance(node, ast.For | ast.AsyncFor | ast.While):
            polled = polled or _checks_a_condition(node)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            polled = False  # a function defined in a loop is not polled by it
        for child in ast.iter_child_nodes(node):
            visit(child, polled)

    visit(tree, False)
    return found


def test_every_fixed_sleep_in_tests_is_listed_with_its_reason() -> None:
    found = {(str(path.relative_to(TESTS)), line): number
             for path in sorted(TESTS.rglob("*.py"))
             for number, line in fixed_sleeps(path.read_text())}
    assert_listed(found, ALLOWED, "a fixed sleep where a test should wait for the component's own decision (or list "
                                  "it in ALLOWED with its reason)")


def test_the_scan_tells_a_poll_from_a_fixed_sleep() -> None:
    source = (
        "import time\n"
        "def poll():\n"
        "    while not done():\n"
        "        time.sleep(0.5)\n"
        "def retry():\n"
        "    for _ in range(50):\n"
        "        if ready():\n"
        "            break\n"
        "        time.sleep(0.2)\n"
        "def absence():\n"
        "    time.sleep(5)  # had its chance\n"
        "    assert not admitted()\n"
        "def paced():\n"
        "    for item in items:\n"
        "        time.sleep(1)\n"
        "        use(item)\n"
        "def nested():\n"
        "    while True:\n"
        "        def later():\n"
        "            time.sleep(2)\n"
    )
    assert fixed_sleeps(source) == [(11, "time.sleep(5)  # had its chance"), (15, "time.sleep(1)"),
                                    (20, "time.sleep(2)")]
