"""A web process imports its URL modules and views when it boots, not in its first request."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.pdf
def test_loading_the_wsgi_application_imports_every_view_before_any_request():
    probe = (
        "import sys, config.wsgi; "
        "from django.urls import get_resolver; "
        "print('url_patterns' in vars(get_resolver()), 'fleet.views' in sys.modules, 'weasyprint' in sys.modules)"
    )
    env = {"DJANGO_SETTINGS_MODULE": "config.test_settings", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "True", "True"]


@pytest.mark.slow
def test_without_weasyprint_the_console_still_boots_and_pdfs_say_what_is_missing():
    """WeasyPrint (and the Pango library under it) is optional: blocked here, the web process
    still boots and serves the sign-in page; only PDF rendering reports what to install."""
    probe = (
        "import sys; sys.modules['weasyprint'] = None; import config.wsgi; "
        "from django.test import Client; from fleet.pdf import pdf_unavailable_reason; "
        "print(Client().get('/accounts/login/').status_code, 'Pango' in pdf_unavailable_reason())"
    )
    env = {"DJANGO_SETTINGS_MODULE": "config.test_settings", "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split()[-2:] == ["200", "True"]
