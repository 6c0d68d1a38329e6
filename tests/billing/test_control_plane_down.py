"""Metering keeps working while the control-plane database is unreachable.

A fresh process gets DATABASE_URL pointing at a closed port and LEDGER_DATABASE_URL at a
migrated SQLite ledger; it posts a batch through the real URL stack and must get 202: the agent
token, its revocation entry and the metering grant are all checked without the control plane.
"""

import json
import os
import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from core.api.agent_tokens import mint_agent_token

from .conftest import make_event

pytestmark = pytest.mark.slow  # subprocess: a server process with the control-plane database down

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
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "HANGAR_VAR_DIR": str(tmp_path),
        "DATABASE_URL": database_url,
        "LEDGER_DATABASE_URL": f"sqlite:///{tmp_path / 'ledger.sqlite3'}",
        "AGENT_TOKEN_KEY": "test-agent-key-of-this-subprocess-only-0123",
        "METERING_GRANT_KEY": "test-grant-key-of-this-subprocess-only-0123",
    }


MINT = """
import sys, uuid, django
from datetime import datetime
django.setup()
from billing.grants import MeteringGrant, sign_grant
from core.api.agent_tokens import mint_agent_token
node, tenant, allocation, start, end = sys.argv[1:6]
print(mint_agent_token(node))
print(sign_grant(MeteringGrant(node_id=uuid.UUID(node), tenant_id=uuid.UUID(tenant), allocation_id=uuid.UUID(allocation),
                               sku="h100-sxm-8x", gpus=8, valid_from=datetime.fromisoformat(start),
                               valid_until=datetime.fromisoformat(end))))
"""


def test_ingest_answers_202_with_the_default_database_down(tmp_path):
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--database", "ledger", "--noinput"],
        cwd=ROOT,
        env=_env(tmp_path, f"sqlite:///{tmp_path / 'unused.sqlite3'}"),
        check=True,
        capture_output=True,
    )
    node, tenant = uuid.uuid4(), uuid.uuid4()
    start = (datetime.now(UTC) - timedelta(hours=2)).replace(minute=0, second=0, microsecond=0)
    events = [make_event(tenant_id=tenant, start=start + timedelta(minutes=i)) for i in range(5)]
    env = _env(tmp_path, "postgres://postgres@127.0.0.1:1/unreachable")
    token, grant = (
        subprocess.run(
            [
                sys.executable,
                "-c",
                MINT,
                str(node),
                str(tenant),
                events[0]["allocation_id"],
                start.isoformat(),
                (start + timedelta(hours=4)).isoformat(),
            ],
            cwd=ROOT,
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
        .stdout.strip()
        .splitlines()[-2:]
    )
    assert token != mint_agent_token(node)  # signed with the subprocess's own key
    events = [{**e, "grant": grant} for e in events]
    for expected_accepted, expected_duplicates in ((5, 0), (0, 5)):
        done = subprocess.run(
            [sys.executable, "-c", CLIENT, token, json.dumps(events)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        result_line, count_line = done.stdout.strip().splitlines()[-2:]
        result = json.loads(result_line)
        assert result == {
            "status": 202,
            "body": {"accepted": expected_accepted, "duplicates": expected_duplicates, "rejected": []},
        }
        assert count_line == "5"
