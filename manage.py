#!/usr/bin/env python
"""Django's command-line utility for Hangar."""

import os
import sys
from pathlib import Path


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    # A checkout with no configuration at all (no SECRET_KEY in the environment, no .env file)
    # is a development machine: its commands run in development mode, as `make` does. Any
    # configured host keeps DEBUG off, and the web server and workers (wsgi, celery) never get
    # this default, so production still refuses to start on development keys.
    if "SECRET_KEY" not in os.environ and not (Path(__file__).resolve().parent / ".env").exists():
        os.environ.setdefault("DEBUG", "true")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
