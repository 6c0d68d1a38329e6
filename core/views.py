"""Core's console pages: sign-in (where each kind of user lands) and the search every page's
header box submits to (docs/search.md)."""

from django.conf import settings
from django.contrib.auth.views import LoginView, redirect_to_login
from django.http import Http404
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from core.api.lookups import parse_uuid
from core.choices import DeliveryState
from core.decorators import console_action, operator_required
from core.errors import Conflict, Invalid
from core.models import OutboxDelivery, OutboxEvent
from core.outbox import describe_target, retry_delivery
from core.problem_types import problem_type, problem_types
from core.search import search as search_index
from core.services.audit import actor_label

LOG_EVENTS = 100


def search(request):
    """Operators only: a signed-in tenant user gets the 403 page, a stranger the sign-in page.
    One exact match opens the object; otherwise hits grouped by kind, 50 at a time."""
    user = request.user
    if not user.is_authenticated:
        return redirect_to_login(request.get_full_path())
    if not (user.is_active and user.is_staff):
        return render(
            request,
            "permission_denied.html",
            {
                "detail": "Search is for operators; tenant users find their allocations in the portal.",
                "permission": "an operator (staff) account",
            },
            status=403,
        )
    raw = request.GET.get("q", "")
    after = request.GET.get("more") or None
    error, page = "", None
    try:
        page = search_index(raw, after=after)
    except Invalid as exc:
        error = exc.detail
    if page is not None and after is None and (hit := page.single_exact) is not None:
        return redirect(hit.url)
    return render(
        request,
        "core/search.html",
        {"q": raw[:200], "search_query": raw[:200], "page": page, "error": error},
        status=400 if error else 200,
    )


OPERATOR_HOME = "/"
TENANT_HOME = "/portal/"


class SignInView(LoginView):
    """Operators land on the overview, tenant users on their portal. A `next` that points at
    the operator home (where an anonymous visit to / was sent from) is a tenant's portal too."""

    def get_redirect_url(self):
        url = super().get_redirect_url()
        user = self.request.user
        if user.is_authenticated and not user.is_staff and url in ("", OPERATOR_HOME):
            return TENANT_HOME
        return url

    def get_default_redirect_url(self):
        return OPERATOR_HOME if self.request.user.is_staff else TENANT_HOME


def problem_type_list(request):
    """Every problem code the API answers with, by app (anyone may read it, like the schema)."""
    return render(request, "core/problem_types.html", {"problem_types": problem_types()})


def problem_type_detail(request, code):
    """The page a problem's `type` URI names: title, status, what it means, what to do."""
    found = problem_type(code)
    if found is None:
        raise Http404("no such problem type")
    return render(request, "core/problem_type.html", {"problem": found})


@operator_required
def notifications(request):
    """The notification log: the latest events (pages, tenant notifications, tests), each with
    its deliveries and every attempt; `?state=dead` lists what is dead-lettered."""
    state = request.GET.get("state", "")
    events = OutboxEvent.objects.prefetch_related("deliveries__attempt_log").order_by("-created_at", "-id")
    if state in DeliveryState.values:
        events = events.filter(deliveries__state=state).distinct()
    else:
        state = ""
    rows = []
    for event in events[:LOG_EVENTS]:
        deliveries = sorted(event.deliveries.all(), key=lambda d: (d.created_at, str(d.pk)))
        rows.append({"event": event, "deliveries": [(d, describe_target(d)) for d in deliveries]})
    dead = sum(1 for row in rows for d, _ in row["deliveries"] if d.state == DeliveryState.DEAD)
    return render(
        request,
        "core/notifications.html",
        {
            "nav": "notifications",
            "rows": rows,
            "state": state,
            "states": DeliveryState.choices,
            "dead": dead,
            "retention_days": settings.NOTIFY_RETENTION_DAYS,
            "dead_retention_days": settings.NOTIFY_DEAD_RETENTION_DAYS,
        },
    )


@operator_required
@require_POST
@console_action("delivery.retry")
def retry_notification(request, pk):
    delivery = OutboxDelivery.objects.filter(pk=parse_uuid(pk)).first() if parse_uuid(pk) else None
    if delivery is None:
        raise Http404("No such delivery.")
    try:
        retry_delivery(delivery, actor=actor_label(request.user))
    except Conflict:
        pass  # already retried or delivered meanwhile: the log shows its state
    return redirect("core:notifications")
