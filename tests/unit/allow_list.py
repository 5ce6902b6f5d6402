"""The reviewed-sites rule the suite's own guards share (test_no_fixed_sleeps, test_no_vacuous_loops): every site a
scan of tests/ finds is listed with its reason, and every listed site is still there."""

from __future__ import annotations

from collections.abc import Mapping


def assert_listed(found: Mapping[tuple[str, str], int], allowed: Mapping[tuple[str, str], str], why: str) -> None:
    """`found`: (path under tests/, line) -> line number; `allowed`: the reviewed ones with their reason. Fails on a
    site not listed (saying `why` it matters) and on a listed site that is gone."""
    unlisted = [f"tests/{path}:{number}: {line}" for (path, line), number in sorted(found.items())
                if (path, line) not in allowed]
    assert not unlisted, f"{why}:\n" + "\n".join(unlisted)
    stale = [key for key in allowed if key not in found]
    assert not stale, f"ALLOWED lists sites that are gone: {stale}"
