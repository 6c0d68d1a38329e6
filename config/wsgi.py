"""WSGI entry point (gunicorn config.wsgi; runserver loads it through WSGI_APPLICATION)."""

import os

from django.core.wsgi import get_wsgi_application
from django.urls import get_resolver

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
application = get_wsgi_application()
# Import every URL module, and the views behind them, at boot rather than inside the first
# request: Django does it lazily, and the first request after a (re)start of a web process
# waited 4-5 s for it (the PDF renderer's import alone is ~3 s), long enough for every agent
# heartbeat queued behind it to arrive late.
get_resolver().url_patterns  # noqa: B018 (evaluated for its side effect: the imports)
# The PDF renderer is imported on first use so that the console runs without Pango; import it
# here when it can be, for the same reason.
from fleet.pdf import warm  # noqa: E402

warm()
