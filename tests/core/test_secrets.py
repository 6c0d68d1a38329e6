"""Production refuses the development keys; `check --deploy` is clean in a production-like
environment. Each case is a fresh process, since settings are read once at start-up."""

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.loadtest import _environment as loadtest_environment

pytestmark = pytest.mark.slow  # subprocess: starts the settings in a fresh interpreter

ROOT = Path(__file__).resolve().parents[2]
# What the environment of a test run adds; a production process starts without any of it.
CLEARED = (
    "DEBUG",
    "SECRET_KEY",
    "AGENT_TOKEN_KEY",
    "METERING_GRANT_KEY",
    "SECURE_SSL_REDIRECT",
    "SESSION_COOKIE_SECURE",
    "CSRF_COOKIE_SECURE",
    "SECURE_HSTS_SECONDS",
    "SECURE_PROXY_SSL_HEADER",
    "NUM_PROXIES",
    "TRUSTED_PROXIES",
    "BMC_NETWORKS",
    "BMC_LAB_ORIGINS",
    "DJANGO_SETTINGS_MODULE",
    # set by the browser tests' live server in this process; a deployment never sets it
    "DJANGO_ALLOW_ASYNC_UNSAFE",
)


def _key() -> str:
    return secrets.token_urlsafe(50)


def _run(tmp_path, argv, **env):
    base = {k: v for k, v in os.environ.items() if k not in CLEARED}
    base.update(HANGAR_VAR_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="config.settings", **env)
    return subprocess.run([sys.executable, *argv], cwd=ROOT, env=base, capture_output=True, text=True, timeout=120)


def _start(tmp_path, **env):
    """What every process does first: load the settings."""
    return _run(tmp_path, ["-c", "from django.conf import settings; print(settings.SECRET_KEY[:4])"], **env)


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({}, "SECRET_KEY is not set"),
        ({"AGENT_TOKEN_KEY": "x" * 40, "METERING_GRANT_KEY": "z" * 40}, "SECRET_KEY is not set"),
        (
            {"SECRET_KEY": "hangar-embedded-default-not-for-production", "AGENT_TOKEN_KEY": "x" * 40},
            "SECRET_KEY is the development key",
        ),
        ({"SECRET_KEY": "x" * 40}, "AGENT_TOKEN_KEY is not set"),
        ({"SECRET_KEY": "x" * 40, "AGENT_TOKEN_KEY": "y" * 40}, "METERING_GRANT_KEY is not set"),
        ({"SECRET_KEY": "short", "AGENT_TOKEN_KEY": "y" * 40}, "SECRET_KEY is shorter than 32"),
        ({"SECRET_KEY": "x" * 40, "AGENT_TOKEN_KEY": "x" * 40}, "AGENT_TOKEN_KEY equals SECRET_KEY"),
        ({"SECRET_KEY": " " * 40, "AGENT_TOKEN_KEY": "y" * 40}, "SECRET_KEY is only whitespace"),
        (
            {"SECRET_KEY": " hangar-embedded-default-not-for-production  ", "AGENT_TOKEN_KEY": "y" * 40},
            "SECRET_KEY is the development key",
        ),
        ({"SECRET_KEY": "ab" * 20}, "SECRET_KEY has fewer than 8 different characters"),
        ({"SECRET_KEY": secrets.token_urlsafe(50) + "\t"}, "SECRET_KEY starts or ends with whitespace"),
    ],
)
def test_production_refuses_to_start_without_real_secrets(tmp_path, env, named):
    done = _start(tmp_path, **env)
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and named in done.stderr


def test_explicit_debug_false_is_production_too(tmp_path):
    done = _start(tmp_path, DEBUG="false")
    assert done.returncode != 0 and "SECRET_KEY is not set" in done.stderr


def test_development_mode_starts_with_no_settings_at_all(tmp_path):
    """`make demo` sets DEBUG=true and nothing else."""
    done = _run(
        tmp_path,
        [
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            "print(settings.SECRET_KEY != settings.AGENT_TOKEN_KEY, settings.SECURE_SSL_REDIRECT)",
        ],
        DEBUG="true",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False"]


def test_agent_tokens_no_longer_use_the_session_key(tmp_path):
    """A leaked SECRET_KEY must not mint agent tokens: the two keys are independent settings."""
    session_key = _key()
    done = _run(
        tmp_path,
        [
            "-c",
            "import django; django.setup(); from django.conf import settings; "
            "print(settings.AGENT_TOKEN_KEY == settings.SECRET_KEY)",
        ],
        DEBUG="true",
        SECRET_KEY=session_key,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_check_deploy_is_clean_with_production_secrets(tmp_path):
    done = _run(
        tmp_path,
        ["manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        SECRET_KEY=_key(),
        AGENT_TOKEN_KEY=_key(),
        METERING_GRANT_KEY=_key(),
    )
    assert done.returncode == 0, done.stdout + done.stderr  # not a single warning, security or other
    assert "no issues" in done.stdout + done.stderr


def test_transport_security_is_on_by_default_and_read_from_the_environment(tmp_path):
    show = (
        "import django; django.setup(); from django.conf import settings as s; "
        "print(s.SECURE_SSL_REDIRECT, s.SESSION_COOKIE_SECURE, s.CSRF_COOKIE_SECURE, s.SECURE_HSTS_SECONDS, "
        "s.SECURE_PROXY_SSL_HEADER)"
    )
    keys = {"SECRET_KEY": _key(), "AGENT_TOKEN_KEY": _key(), "METERING_GRANT_KEY": _key()}
    default = _run(tmp_path, ["-c", show], **keys)
    assert default.returncode == 0, default.stderr
    assert default.stdout.strip() == "True True True 31536000 None"  # no proxy configured: no header trusted
    proxied = _run(tmp_path, ["-c", show], **keys, NUM_PROXIES="1", TRUSTED_PROXIES="10.1.0.0/24")
    assert proxied.stdout.strip() == "True True True 31536000 ('HTTP_X_FORWARDED_PROTO', 'https')"
    overridden = _run(
        tmp_path,
        ["-c", show],
        **keys,
        SECURE_SSL_REDIRECT="false",
        SECURE_HSTS_SECONDS="60",
        SECURE_PROXY_SSL_HEADER="",
    )
    assert overridden.stdout.strip() == "False True True 60 None"


def test_plain_http_is_redirected_to_https_in_production(tmp_path):
    """X-Forwarded-Proto is believed only from the configured proxy: a client reaching the web
    server directly cannot claim HTTPS with it."""
    script = (
        "import django; django.setup(); from django.test import Client; "
        "r = Client().get('/api/v1/ops/nodes'); print(r.status_code, r.headers.get('Location')); "
        "r = Client(REMOTE_ADDR='10.1.0.5').get('/api/v1/ops/nodes', HTTP_X_FORWARDED_PROTO='https'); "
        "print(r.status_code, r.headers.get('Strict-Transport-Security')); "
        "r = Client(REMOTE_ADDR='203.0.113.9').get('/api/v1/ops/nodes', HTTP_X_FORWARDED_PROTO='https'); "
        "print(r.status_code, r.headers.get('Location'))"
    )
    keys = {"SECRET_KEY": _key(), "AGENT_TOKEN_KEY": _key(), "METERING_GRANT_KEY": _key()}
    done = _run(tmp_path, ["-c", script], **keys, NUM_PROXIES="1", TRUSTED_PROXIES="10.1.0.0/24")
    assert done.returncode == 0, done.stderr
    redirected, behind_proxy, direct = done.stdout.strip().splitlines()[-3:]
    assert redirected == "301 https://testserver/api/v1/ops/nodes"
    assert behind_proxy.startswith("401 max-age=31536000; includeSubDomains; preload")
    assert direct == "301 https://testserver/api/v1/ops/nodes"  # the header from a client is dropped
    no_proxy = _run(tmp_path, ["-c", script], **keys)
    assert no_proxy.stdout.strip().splitlines()[-2].startswith("301 ")  # no proxy configured: never believed


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"NUM_PROXIES": "1"}, "Set NUM_PROXIES"),
        ({"TRUSTED_PROXIES": "10.0.0.0/8"}, "Set NUM_PROXIES"),
        ({"TRUSTED_PROXIES": "10.0.0.0/33", "NUM_PROXIES": "1"}, "TRUSTED_PROXIES"),
        ({"BMC_NETWORKS": "10.0.0.0/8+ftp"}, "BMC_NETWORKS"),
        ({"BMC_LAB_ORIGINS": "http://127.0.0.1:8001"}, "BMC_LAB_ORIGINS"),
    ],
)
def test_production_refuses_to_start_with_an_unsafe_network_setting(tmp_path, env, named):
    done = _start(tmp_path, SECRET_KEY=_key(), AGENT_TOKEN_KEY=_key(), METERING_GRANT_KEY=_key(), **env)
    assert done.returncode != 0
    assert "ImproperlyConfigured" in done.stderr and named in done.stderr


def test_check_deploy_is_clean_with_production_settings_behind_a_proxy(tmp_path):
    done = _run(
        tmp_path,
        ["manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        SECRET_KEY=_key(),
        AGENT_TOKEN_KEY=_key(),
        METERING_GRANT_KEY=_key(),
        NUM_PROXIES="1",
        TRUSTED_PROXIES="10.1.0.0/24",
        BMC_NETWORKS="10.64.0.0/16, 10.65.0.0/24+http",
        HANGAR_DEVTOOLS="false",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no issues" in done.stdout + done.stderr


def test_the_demo_refuses_to_run_without_debug(tmp_path):
    done = _run(
        tmp_path,
        ["manage.py", "demo", "--no-serve"],
        SECRET_KEY=_key(),
        AGENT_TOKEN_KEY=_key(),
        METERING_GRANT_KEY=_key(),
        DEBUG="false",
    )
    assert done.returncode != 0 and "refuses to run with DEBUG off" in done.stderr
    assert "operator" not in done.stdout


def test_manage_py_on_an_unconfigured_checkout_runs_in_development_mode(tmp_path):
    """No SECRET_KEY and no .env: a developer's checkout, so `manage.py` works as `make` does;
    a host that configured anything still gets the refusal."""
    bare = _run(tmp_path, ["manage.py", "makemigrations", "--check", "--dry-run"])
    assert bare.returncode == 0, bare.stdout + bare.stderr
    configured = _run(tmp_path, ["manage.py", "check"], SECRET_KEY=_key())
    assert configured.returncode != 0 and "AGENT_TOKEN_KEY is not set" in configured.stderr


def test_the_load_tests_production_environment_starts(tmp_path, monkeypatch):
    """`make loadtest` serves with production settings and throwaway keys; every key production
    demands must be among them (a key added later once stopped the load test at start)."""
    for name in (*CLEARED, "BMC_CREDENTIAL_KEY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/hangar_unused")
    env = loadtest_environment()
    done = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env={**env, "HANGAR_VAR_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
