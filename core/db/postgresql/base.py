"""PostgreSQL, with the persistent connection's health check skipped while it is in use.

Django's CONN_HEALTH_CHECKS sends `SELECT 1` before the first statement of every request. On
the agent path that is one of the two database round trips a heartbeat makes (and 0.2–0.3 ms of
web CPU plus a backend wake-up each, at 300 calls/s per worker), to learn what the previous
request, a few milliseconds earlier, already showed: the connection works. Here the check runs
only when the connection has been idle for HEALTH_CHECK_AFTER_IDLE_S. A connection in steady use
that the server drops between two requests (a restart shorter than that) costs one request a
503 (core.middleware's outage answer); Django then closes the errored connection and the next
request opens a new one. Every connection idle across a longer outage is checked first, as
before. docs/deployment.md, "Database connections".
"""

import time

from django.db.backends.postgresql import base

HEALTH_CHECK_AFTER_IDLE_S = 1.0


class DatabaseWrapper(base.DatabaseWrapper):
    _proven_at = float("-inf")  # when a request last used this connection without an error
    _used = False  # a cursor was opened since the last request boundary

    def create_cursor(self, name=None):
        self._used = True
        return super().create_cursor(name)

    def close_if_unusable_or_obsolete(self):
        # Called as each request (or Celery task) starts and finishes.
        super().close_if_unusable_or_obsolete()
        if self.connection is None:
            return
        now = time.monotonic()
        if self._used and not self.errors_occurred:
            self._proven_at = now
        self._used = False
        if now - self._proven_at < HEALTH_CHECK_AFTER_IDLE_S:
            self.health_check_done = True

    def close(self):
        super().close()
        self._proven_at = float("-inf")
