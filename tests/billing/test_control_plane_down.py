"""Metering keeps working while the control-plane database is unreachable.

A fresh process gets DATABASE_URL pointing at a closed port and LEDGER_DATABASE_URL at a
migrated SQLite ledger; it posts a batch through the real URL stack and must get 202.
"""
import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime
from pathlib import Path

from core.api.agent_tokens import mint_agent_token

from .conftest import make_event

ROOT = Path(__file__).resolve().parents[2]
CLIENT = """
import json, sys, django
django.setup()
from django.test import Client
token, events = sys.argv[1], json.loads(sys.argv[2])
response = Client().post("/api/agent/v1/meter-events", {"events": events}, content_type="application/json",
                         HTTP_AUTHORIZATION="Bearer " + token)
print(json.dumps({"status": response.status_code, "body": response.json()}))
from billing.models import UsageEvent
print(UsageEvent.objects.count())
"""


def _env(tmp_path, database_url):
    return {**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings", "HANGAR_VAR_DIR": str(tmp_path),
            "DATABASE_URL": database_url, "LEDGER_DATABASE_URL": f"sqlite:///{tmp_path / 'ledger.sqlite3'}",
            "AGENT_TOKEN_KEY": "test-agent-key-of-this-subprocess-only-0123"}


def test_ingest_answers_202_with_the_default_database_down(tmp_path):
    subprocess.run([sys.executable, "manage.py", "migrate", "--database", "ledger", "--noinput"], cwd=ROOT,
                   env=_env(tmp_path, f"sqlite:///{tmp_path / 'unused.sqlite3'}"), check=True, capture_output=True)
    node = uuid.uuid4()
    env = _env(tmp_path, "postgres://postgres@127.0.0.1:1/unreachable")
    token = subprocess.run([sys.executable, "-c", "import django; django.setup(); from core.api.agent_tokens import "
                            f"mint_agent_token; print(mint_agent_token('{node}'))"],
                           cwd=ROOT, env=env, check=True, capture_output=True, text=True).stdout.strip()
    assert token != mint_agent_token(node)  # signed with the subprocess's own key
    events = [make_event(tenant_id=uuid.uuid4(), start=datetime(2026, 9, 1, 0, i, tzinfo=UTC)) for i in range(5)]
    for expected_accepted, expected_duplicates in ((5, 0), (0, 5)):
        done = subprocess.run([sys.executable, "-c", CLIENT, token, json.dumps(events)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        result_line, count_line = done.stdout.strip().splitlines()[-2:]
        result = json.loads(result_line)
        assert result == {"status": 202, "body": {"accepted": expected_accepted, "duplicates": expected_duplicates}}
        assert count_line == "5"
