"""Resource quantities (gpuctl.kube.objects.count) read as the API server writes them, without the kubernetes
package: its values, held against kubernetes.utils.parse_quantity (the behaviour count replaced)."""

from __future__ import annotations

import pytest
from kubernetes.utils import parse_quantity

from gpuctl.kube.objects import count

QUANTITIES = ["0", "8", "1k", "1.5k", "2Gi", "3Ki", "0.5Mi", "2Ti", "1Ei", "1M", "5P", "2E", "1e3", "1500m", "100n",
              "4u", 3, 2.7]


@pytest.mark.parametrize("quantity", QUANTITIES)
def test_count_reads_a_quantity_as_kubernetes_does(quantity: str | int) -> None:
    assert count(quantity) == int(parse_quantity(quantity))


def test_the_canonical_forms_the_server_writes() -> None:
    assert (count("1k"), count("2Gi"), count("4")) == (1000, 2 * 1024**3, 4)


@pytest.mark.parametrize("text", ["", "abc", "12i", "ki", "1ki", "1.2.3"])
def test_what_is_no_quantity_is_a_value_error(text: str) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)
    with pytest.raises(ValueError):
        count(text)
