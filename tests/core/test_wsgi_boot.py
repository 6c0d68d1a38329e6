"""A web process imports its URL modules and views when it boots, not in its first request."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
