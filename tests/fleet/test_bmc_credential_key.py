"""Production refuses to start without its own Fernet key for BMC credentials."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow  # subprocess: starts the settings in a fresh interpreter

ROOT = Path(__file__).resolve().parents[2]
KEYS = {name: secrets.token_urlsafe(50) for name in ("SECRET_KEY", "AGENT_TOKEN_KEY", "METERING_GRANT_KEY")}


def _start(tmp_path, **env):
    base = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "BMC_CREDENTIAL_KEY", "DJANGO_SETTINGS_MODULE")}
    base.update(HANGAR_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="config.settings", **KEYS, **env)
    script = "import django; django.setup(); print('started')"
    return subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=base, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("key", "says"),
    [
        (None, "BMC_CREDENTIAL_KEY is not set"),
        ("b-SjIPSHzNUGmGA2cqXfEa1Zs5C51xQobzcu12wrWE0=", "BMC_CREDENTIAL_KEY is the development key"),
        ("a-long-passphrase-that-is-not-a-fernet-key-at-all", "is not a Fernet key"),
    ],
)
def test_production_refuses_a_missing_or_unusable_key(tmp_path, key, says):
    done = _start(tmp_path, **({"BMC_CREDENTIAL_KEY": key} if key else {}))
    assert done.returncode != 0 and says in done.stderr


def test_production_starts_with_its_own_fernet_key(tmp_path):
    from cryptography.fernet import Fernet

    done = _start(tmp_path, BMC_CREDENTIAL_KEY=Fernet.generate_key().decode())
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "started"
