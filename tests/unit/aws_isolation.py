"""An AWS environment of the test's own for the EKS provider's unit tests: no profile, region, endpoint or session
of the machine's, no config or credentials file, and fixed fake keys (nothing here can reach AWS)."""

from __future__ import annotations

from pathlib import Path

import pytest

KEY, SECRET = "AKIAUNITTEST00000000", "unit-test-secret-value"


def isolate_aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name in ("AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION", "AWS_ENDPOINT_URL", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", KEY)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
