"""Celery beat's scheduler: django-celery-beat's DatabaseScheduler behind the single-beat lease.

A second beat (started twice by a deploy, or left over on another host) would double every
loop. Each tick first holds the lease (core.services.beat_lease); a beat that does not hold it
sends nothing, logs once, and tries again a few seconds later, ready to take over when the
holder's lease goes stale.
"""

import logging
import os
import socket

from django.db import DatabaseError, close_old_connections
from django.utils import timezone
from django_celery_beat.schedulers import DatabaseScheduler

from core.services.beat_lease import hold_beat_lease

logger = logging.getLogger(__name__)
RETRY_SECONDS = 5.0


class SingleBeatScheduler(DatabaseScheduler):
    def __init__(self, *args, **kwargs):
        self.holder = f"{socket.gethostname()}:{os.getpid()}"
        self._leading: bool | None = None
        super().__init__(*args, **kwargs)

    def tick(self, *args, **kwargs):
        try:
            leading = hold_beat_lease(holder=self.holder, now=timezone.now())
        except DatabaseError as exc:  # the database is away: nobody can schedule; wait it out
            logger.warning("beat lease unavailable (%s); not scheduling", exc)
            close_old_connections()
            return RETRY_SECONDS
        if leading != self._leading:
            logger.warning(
                "beat %s %s",
                self.holder,
                "holds the single-beat lease: scheduling"
                if leading
                else "found another beat holding the lease: NOT scheduling",
            )
            self._leading = leading
        if not leading:
            return RETRY_SECONDS
        return super().tick(*args, **kwargs)
