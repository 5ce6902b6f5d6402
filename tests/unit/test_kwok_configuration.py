"""The sim's KwokConfiguration against kwok's own source. kwokctl hands that document to the kwok controller as it
is, without kwok's defaults, so every option kwok defaults must be spelled out in templates/sim/kwokctl.yaml.j2
(with enableDebuggingHandlers missing the controller served no pod logs): a kwok upgrade that defaults one more
fails here."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpuctl.simulator.kwok import kwokctl_config
from gpuctl.tools.gobuild import go_toolchain
from gpuctl.tools.pins import KWOK_VERSION, SIM_TOOLS

pytestmark = pytest.mark.conformance  # kwok's source from the Go module proxy

# what the sim sets otherwise than kwok, and why: templates/sim/kwokctl.yaml.j2
RAISED = {"podPlayStageParallelism": 16, "nodePlayStageParallelism": 16, "nodeLeaseParallelism": 16}
DEFAULTED = re.compile(r"if in\.Options\.(\w+) == (?:nil|0|\"\") \{\s*(?:var ptrVar1 \w+ = (\S+)\s*"
                       r"in\.Options\.\1 = &ptrVar1|in\.Options\.\1 = (\S+))\s*\}")


@pytest.fixture(scope="module")
def kwok_source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    go, why = go_toolchain()
    if go is None:
        pytest.fail(why)
    proc = subprocess.run([go, "mod", "download", "-json", f"sigs.k8s.io/kwok@{KWOK_VERSION}"],
                          cwd=tmp_path_factory.mktemp("kwok"), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    return Path(json.loads(proc.stdout)["Dir"])


def kwok_defaults(source: Path) -> dict[str, Any]:
    """SetObjectDefaults_KwokConfiguration's value of each option it defaults, by the option's JSON name."""
    apis = source / "pkg" / "apis" / "config" / "v1alpha1"
    generated = (apis / "zz_generated.defaults.go").read_text()
    body = generated.split("func SetObjectDefaults_KwokConfiguration(", 1)[1].split("\n}\n", 1)[0]
    types = (apis / "kwok_configuration_types.go").read_text()
    defaulted = DEFAULTED.findall(body)
    assert len(defaulted) >= 3, body  # a kwok whose defaulting code this reading no longer understands
    defaults = {}
    for field, pointed, value in defaulted:
        tag = re.search(rf"^\s*{field}\s+\S+\s+`json:\"(\w+)", types, re.M)
        assert tag is not None, field
        defaults[tag[1]] = json.loads(pointed or value)
    assert {"enableDebuggingHandlers", "podPlayStageParallelism", "cidr"} <= set(defaults), defaults
    return defaults


def test_the_sims_kwok_configuration_spells_out_every_kwok_default(kwok_source: Path) -> None:
    rendered = kwokctl_config({name: f"/bin/{name}" for name in SIM_TOOLS})
    documents = [d for d in yaml.safe_load_all(rendered) if d]
    options = next(d for d in documents if d["kind"] == "KwokConfiguration")["options"]
    assert options == {**kwok_defaults(kwok_source), **RAISED}
