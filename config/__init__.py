"""Hangar project configuration: settings, URLs, the Celery app and the database router."""

from .celery import app as celery_app

__all__ = ("celery_app",)
