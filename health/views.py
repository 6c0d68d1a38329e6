"""Health console pages (thin: selectors compute, charts draw, templates show)."""

from datetime import timedelta

from django import forms
from django.http import Http404, HttpResponseBadRequest
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from core.api.lookups import parse_uuid
from core.decorators import console_action, operator_required
from core.validators import validate_display_text
from fleet.choices import Attribution
from fleet.models import Node
from fleet.selectors import OUT_OF_SERVICE_STATES

from . import charts, selectors, xid
from .choices import Severity
from .policy import ESCALATIONS, HEARTBEAT_SOURCE, THERMAL_THROTTLE_C, policy_rows
from .services.incidents import (
    IncidentNotClosable,
    impact_gpu_hours,
    open_operator_incident,
    update_postmortem,
)
from .services.paging import PageStateRefused, acknowledge_page, resolve_page

CHART_WINDOW = timedelta(days=30)


@operator_required
def dashboard(request):
    now = timezone.now()
    severity = request.GET.get("severity") if request.GET.get("severity") in Severity.values else None
    by_hall = selectors.health_by_hall()
    mttr = selectors.mean_time_to_repair(now - CHART_WINDOW)
    totals: dict = {}
    for row in by_hall:
        totals[row["health"]] = totals.get(row["health"], 0) + row["n"]
    figures = {
        "health": charts.health_by_hall_figure(by_hall).to_json(),
        "lifecycle": charts.lifecycle_by_hall_figure(by_hall).to_json(),
        "causes": charts.failure_causes_figure(selectors.failure_causes(now - CHART_WINDOW)).to_json(),
    }
    return render(
        request,
        "health/dashboard.html",
        {
            "nav": "health",
            "totals": sorted(totals.items()),
            "incidents": selectors.open_incidents(severity=severity),
            "severity": severity,
            "mttr_hours": round(mttr.total_seconds() / 3600, 1) if mttr else None,
            "racks": [
                r
                for r in selectors.health_by_rack()
                if r["health"] != "healthy" or r["lifecycle"] in OUT_OF_SERVICE_STATES
            ][:200],
            "figures": figures,
        },
    )


@operator_required
def policy(request):
    return render(
        request,
        "health/policy.html",
        {
            "nav": "health",
            "rows": policy_rows(),
            "escalations": ESCALATIONS,
            "overrides": list(xid.OVERRIDES.values()),
            "heartbeat": HEARTBEAT_SOURCE,
            "thermal_c": THERMAL_THROTTLE_C,
        },
    )


class PostmortemForm(forms.Form):
    cause = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), required=False)
    attribution = forms.ChoiceField(choices=Attribution.choices)
    close = forms.BooleanField(
        required=False, help_text="close the incident (every node back through the gate or in RMA)"
    )


@operator_required
@console_action("incident.postmortem")
def incident(request, pk):
    incident_id = parse_uuid(pk)
    found = selectors.incident_detail(incident_id) if incident_id else None
    if found is None:
        raise Http404("No such incident.")
    error = None
    if request.method == "POST":
        form = PostmortemForm(request.POST)
        if form.is_valid():
            try:
                update_postmortem(incident=found, actor=f"user:{request.user.username}", **form.cleaned_data)
                return redirect("health:incident", pk=found.pk)
            except IncidentNotClosable as exc:
                error = str(exc)
    else:
        form = PostmortemForm(initial={"cause": found.cause, "attribution": found.attribution or Attribution.PROVIDER})
    return render(
        request,
        "health/incident.html",
        {
            "nav": "health",
            "incident": found,
            "form": form,
            "error": error,
            "impact_gpu_hours": found.impact_gpu_hours or impact_gpu_hours(found, timezone.now()),
            "history": selectors.node_history([n.pk for n in found.nodes.all()]),
        },
    )


class OperatorIncidentForm(forms.Form):
    title = forms.CharField(max_length=200, validators=[validate_display_text])
    hostnames = forms.CharField(help_text="affected nodes, comma-separated hostnames")
    severity = forms.ChoiceField(choices=Severity.choices)

    def clean_hostnames(self):
        names = sorted({h.strip() for h in self.cleaned_data["hostnames"].split(",") if h.strip()})
        nodes = list(Node.objects.filter(hostname__in=names))
        missing = sorted(set(names) - {n.hostname for n in nodes})
        if not nodes or missing:
            raise forms.ValidationError(
                f"Unknown hostnames: {', '.join(missing) or '(none given)'}; use hostnames as listed on the Fleet page."
            )
        return nodes


@operator_required
@console_action("incident.open")
def new_incident(request):
    form = OperatorIncidentForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        created = open_operator_incident(
            nodes=form.cleaned_data["hostnames"],
            title=form.cleaned_data["title"],
            severity=form.cleaned_data["severity"],
            actor=f"user:{request.user.username}",
        )
        return redirect("health:incident", pk=created.pk)
    return render(request, "health/new_incident.html", {"nav": "health", "form": form})


@operator_required
@require_POST
@console_action("incident.acknowledge")
def incident_page(request, pk):
    """Acknowledge or resolve the incident's page from its console page."""
    incident_id = parse_uuid(pk)
    found = selectors.incident_detail(incident_id) if incident_id else None
    if found is None:
        raise Http404("No such incident.")
    act = {"acknowledge": acknowledge_page, "resolve": resolve_page}.get(request.POST.get("do", ""))
    if act is None:
        return HttpResponseBadRequest("do must be acknowledge or resolve.")
    try:
        act(found, actor=f"user:{request.user.username}", via="the console")
    except PageStateRefused:
        pass  # the page shows the state it is in
    return redirect("health:incident", pk=found.pk)
