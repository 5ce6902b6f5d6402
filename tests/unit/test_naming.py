import pytest

from gpuctl.model.naming import MAX_NAME_LENGTH, check_count, check_name
from gpuctl.util.errors import UsageError


@pytest.mark.parametrize("name", ["demo", "a", "gpu-1", "1gpu", "a" * MAX_NAME_LENGTH])
def test_valid_names(name: str) -> None:
    assert check_name(name, "--name") == name


@pytest.mark.parametrize("name", ["", "Bad_Name!", "UPPER", "-lead", "trail-", "dot.ted", "a" * (MAX_NAME_LENGTH + 1)])
def test_invalid_names_name_the_field_and_the_fix(name: str) -> None:
    with pytest.raises(UsageError) as err:
        check_name(name, "--name")
    line = err.value.one_line()
    assert line.startswith("--name: ") and "lowercase letters" in line


@pytest.mark.parametrize("value,ok", [(1, True), (5000, True), (0, False), (-1, False), (5001, False)])
def test_counts(value: int, ok: bool) -> None:
    if ok:
        assert check_count(value, "--nodes") == value
    else:
        with pytest.raises(UsageError, match="--nodes"):
            check_count(value, "--nodes")
