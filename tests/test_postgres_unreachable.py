"""A PostgreSQL test skips without a server on a developer's machine, and fails in CI."""

from __future__ import annotations

import pytest

from tests._postgres import in_ci, postgres_unreachable

URL = "postgresql+psycopg://postgres@127.0.0.1:1/none"


@pytest.mark.parametrize("value", ["true", "1", "yes"])
def test_an_unreachable_postgres_fails_the_test_in_ci(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv("CI", value)
    assert in_ci()
    with pytest.raises(pytest.fail.Exception, match="CI is set"):
        postgres_unreachable(URL, ConnectionRefusedError("refused"))


@pytest.mark.parametrize("value", [None, "", "false", "0"])
def test_an_unreachable_postgres_skips_the_test_outside_ci(
    monkeypatch: pytest.MonkeyPatch, value: str | None
) -> None:
    if value is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", value)
    assert not in_ci()
    with pytest.raises(pytest.skip.Exception, match="does not answer at"):
        postgres_unreachable(URL, ConnectionRefusedError("refused"))
