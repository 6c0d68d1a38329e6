"""docs/health-policy.md's Xid tables are generated from the catalogue and stay in step."""

import pytest
from django.core.management import CommandError, call_command

from health import policy_docs, xid


def test_the_docs_are_in_step_with_the_catalogue_and_overrides():
    text = policy_docs.DOC.read_text()
    assert policy_docs.in_step(text), "run: manage.py health_policy_docs"
    for number in xid.catalog():
        assert f"\n| {number} | " in text
    for name in xid.OVERRIDES:
        assert f"| {name} |" in text


def test_the_command_writes_the_block_and_check_refuses_stale_docs(tmp_path, monkeypatch):
    stale = tmp_path / "health-policy.md"
    stale.write_text(f"# Health\n\n{policy_docs.BEGIN}\n| 1 | stale |\n{policy_docs.END}\n\nafter\n")
    monkeypatch.setattr(policy_docs, "DOC", stale)
    with pytest.raises(CommandError):
        call_command("health_policy_docs", "--check")
    call_command("health_policy_docs")
    text = stale.read_text()
    assert policy_docs.in_step(text) and "stale" not in text and text.endswith("after\n")
    call_command("health_policy_docs", "--check")
