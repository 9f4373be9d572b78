"""Without the `make references` cache the Java interop tests fail under CI and skip, with a warning, elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.rocketmq_java import require_references


def test_a_missing_cache_fails_under_ci_naming_the_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKMQ_REFERENCES_DIR", str(tmp_path))
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="run `make references`"):
        require_references("rocketmq", "runner")


def test_a_missing_cache_skips_elsewhere_with_a_warning(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKMQ_REFERENCES_DIR", str(tmp_path))
    monkeypatch.delenv("CI", raising=False)
    with pytest.warns(UserWarning, match="make references"), pytest.raises(pytest.skip.Exception):
        require_references("rocketmq")


def test_a_filled_cache_is_accepted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKMQ_REFERENCES_DIR", str(tmp_path))
    for name, stamp in (("rocketmq", ".fetched-from-pom"), ("runner", ".compiled-from-sources")):
        (tmp_path / name).mkdir()
        (tmp_path / name / stamp).touch()
    assert require_references("rocketmq", "runner") == tmp_path
