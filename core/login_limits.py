"""Sign-in limits, as django-axes applies them (settings: AXES_*): two limits at once.

- per username *and* address: LOGIN_FAILURE_LIMIT (5) misses for one account from one address
  lock that pair (an attacker elsewhere cannot lock the owner out by guessing their username);
- per address, whatever the username: LOGIN_ADDRESS_FAILURE_LIMIT (20) misses lock the address
  (spraying one password over many usernames from one address is limited), set higher than the
  first so that one person's typos never lock out everyone behind their office's address.

Axes counts failures per lockout parameter set and compares the largest count with one limit;
`PairAndAddressHandler` gives each set its own limit by answering "locked" (the address limit)
as soon as the pair reaches the pair limit. The lockout answer is a 429 with Retry-After.
"""

import math

from axes.handlers.database import AxesDatabaseHandler
from axes.helpers import get_cool_off
from django.conf import settings
from django.http import HttpResponse
from django.template.loader import render_to_string

# axes' order: [(username, ip_address), ip_address] (settings.AXES_LOCKOUT_PARAMETERS)
PAIR, ADDRESS = 0, 1


class PairAndAddressHandler(AxesDatabaseHandler):
    def get_failures(self, request, credentials=None) -> int:
        counts = [
            sum(attempts.values_list("failures_since_start", flat=True))
            for attempts in self.get_user_attempts(request, credentials)
        ]
        pair = counts[PAIR] if len(counts) > PAIR else 0
        address = counts[ADDRESS] if len(counts) > ADDRESS else 0
        if pair >= settings.LOGIN_FAILURE_LIMIT:
            return max(address, settings.LOGIN_ADDRESS_FAILURE_LIMIT)
        return address


def locked_out(request, original_response=None, credentials=None) -> HttpResponse:
    """The lockout answer: 429, how long to wait (Retry-After, seconds), nothing else said."""
    cool_off = get_cool_off(request)
    seconds = max(1, math.ceil(cool_off.total_seconds())) if cool_off else 900
    body = render_to_string(
        "registration/locked_out.html", {"minutes": max(1, math.ceil(seconds / 60))}, request=request
    )
    response = HttpResponse(body, status=429)
    response["Retry-After"] = str(seconds)
    return response
