"""The Celery application. Tasks are thin (ids in, one service call) and live in each app's tasks.py."""

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

app = Celery("hangar")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
