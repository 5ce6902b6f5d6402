"""The rules behind judging every input early, one function each: numbers of any length, label selectors,
path targets."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuctl.model.naming import Huge, check_count, check_selector, parse_count
from gpuctl.model.strict_yaml import loads
from gpuctl.util.errors import UsageError
from gpuctl.util.paths import check_file_path, check_target


def test_a_number_of_any_length_is_read_and_refused_by_its_bound() -> None:
    assert parse_count("0042", "--nodes") == 42 and type(parse_count("9" * 18, "--nodes")) is int
    huge = parse_count("9" * 5000, "--nodes")
    assert isinstance(huge, Huge) and huge > 10 ** 17 and str(huge) == f"{huge}" == "a number of 5000 digits"
    with pytest.raises(UsageError, match="--nodes: must be at most 5000, got a number of 5000 digits"):
        check_count(huge, "--nodes")
    with pytest.raises(UsageError, match="must be at least 1, got a negative number of 30 digits"):
        check_count(Huge(30, negative=True), "--nodes")
    for bad in ("", "-1", "1_000", "٣", " 3"):
        with pytest.raises(UsageError, match="is not a whole number"):
            parse_count(bad, "--nodes")


def test_yaml_numbers_past_the_limit() -> None:
    assert loads(f"n: {'9' * 5000}", "s", "-f", long_numbers=True) == {"n": Huge(5000)}
    assert str(loads(f"n: -{'1' * 40}", "s", "-f", long_numbers=True)["n"]) == "a negative number of 40 digits"
    with pytest.raises(UsageError, match="--kubeconfig: s at line 2: a number of 5000 digits"):
        loads(f"a: 1\nn: {'9' * 5000}", "s", "--kubeconfig")
    with pytest.raises(UsageError, match="is not an integer gpuctl can read"):
        loads("n: !!int zz", "s", "-f")
    assert loads("n: !!int 0x10\nm: 12", "s", "-f") == {"n": 16, "m": 12}


@pytest.mark.parametrize("selector", ["gpu=a100", "a==b,c!=d", "zone in (a, b),!spot", "nvidia.com/gpu.product",
                                      "a notin ()", "count>3", "a="])
def test_label_selectors_kubernetes_takes(selector: str) -> None:
    assert check_selector(selector, "--selector") == selector


@pytest.mark.parametrize("selector,problem", [
    ("a,,=b!", "an empty requirement"), ("", "is not accepted"), ("a=b,", "an empty requirement"),
    ("!a=b", "is not a label selector requirement"), ("a in x", "is not a label selector requirement"),
    ("a>b", "not a whole number"), ("a=b c", "is not a label selector requirement"), ("Bad_/k", "invalid key"),
    ("a in (b", "is not a label selector requirement"), ("a=b!", "is not a label selector requirement"),
    ("a=-b", "invalid value"), (" a=b", "is not accepted"),
])
def test_label_selectors_kubernetes_refuses(selector: str, problem: str) -> None:
    with pytest.raises(UsageError, match=f"^--selector: .*{problem}"):
        check_selector(selector, "--selector")


def test_path_targets(tmp_path: Path) -> None:
    file = tmp_path / "file"
    file.write_text("")
    check_target(tmp_path / "new" / "deeper" / "kc", "--kubeconfig")
    check_target(file, "--kubeconfig")
    check_target(tmp_path, "--out", directory=True)
    check_file_path(file, "--kubeconfig")
    refusals = [
        (lambda: check_target(file, "--out", directory=True), "it is not a directory"),
        (lambda: check_target(tmp_path, "--kubeconfig"), "it is not a regular file"),
        (lambda: check_target(file / "sub" / "kc", "--kubeconfig"), f"{file} is not a directory"),
        (lambda: check_target(Path("/proc/nonexistent/kc"), "--kubeconfig"), "/proc is on a proc file system"),
        (lambda: check_target(Path("/sys/gpuctl-test"), "--out", directory=True), "/sys is on a sysfs file system"),
        (lambda: check_file_path(tmp_path, "--kubeconfig"), "is not a regular file"),
        (lambda: check_file_path(Path("/proc/nonexistent/kc"), "--kubeconfig"), "/proc is on a proc file system"),
        (lambda: check_target(Path("a\nb"), "--out"), "has control characters"),
        (lambda: check_target(tmp_path / ("x" * 256), "--out"), "is too long"),
    ]
    (tmp_path / "link").symlink_to(tmp_path / "nowhere")
    refusals.append((lambda: check_target(tmp_path / "link", "--kubeconfig"), "a symbolic link to nothing"))
    for call, problem in refusals:
        with pytest.raises(UsageError) as err:
            call()
        assert problem in err.value.one_line() and err.value.field in ("--kubeconfig", "--out"), err.value.one_line()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file", "link"]  # judging wrote nothing
