"""Health in the admin: read-only. Conditions come from agent heartbeats and checks, incidents
from the health services; the console is where operators act on them."""

from django import forms
from django.contrib import admin, messages
from django.db.models import Q

from core.admin import AtScaleAdmin, AuditedModelAdmin, ReadOnlyAdmin
from core.netguard import AddressRefused
from core.services.audit import actor_label
from core.services.permissions import has_permission
from core.transports import check_webhook_url

from .choices import PagingKind
from .models import Condition, FabricHold, Incident, PagingChannel
from .services.paging import send_test_page


@admin.register(Condition)
class ConditionAdmin(ReadOnlyAdmin, AtScaleAdmin):
    list_display = ("node", "gpu_index", "signal", "severity", "status", "first_seen", "last_seen", "count")
    # no "signal" filter: its choices would be a DISTINCT over every condition row
    list_filter = ("severity", "status")
    search_fields = ("node__hostname",)
    search_help_text = "Exact or first characters of a hostname."
    index_search = {"hostname": "node_id"}
    list_select_related = ("node",)
    raw_id_fields = ("node",)


@admin.register(Incident)
class IncidentAdmin(ReadOnlyAdmin, AtScaleAdmin):
    list_display = ("title", "state", "severity", "opened_by", "opened_at", "closed_at")
    list_filter = ("state",)
    search_fields = ("title",)
    search_help_text = "Exact or first characters of an incident id or of a hostname it touched."
    index_search = {
        "incident_id": "pk",
        "hostname": lambda ids: Q(pk__in=Incident.nodes.through.objects.filter(node_id__in=ids).values("incident_id")),
    }


@admin.register(FabricHold)
class FabricHoldAdmin(ReadOnlyAdmin, AtScaleAdmin):
    """Nodes whose fabric signals a correlated link failure holds (health.services.fabric):
    written and ended only by the health sweep."""

    list_display = ("node", "incident", "held_at", "failing_since", "signals", "returned_at", "released_at")
    # open holds first is what an operator looks for: the filter is on the two end times
    list_filter = (("returned_at", admin.EmptyFieldListFilter), ("released_at", admin.EmptyFieldListFilter))
    search_fields = ("node__hostname",)
    search_help_text = "Exact or first characters of a hostname or of the incident id."
    index_search = {"hostname": "node_id", "incident_id": "incident_id"}
    list_select_related = ("node", "incident")
    raw_id_fields = ("node", "incident")


class PagingChannelForm(forms.ModelForm):
    """Each kind's fields checked together; URLs through the webhook guard (core.netguard)."""

    secret = forms.CharField(
        required=False,
        max_length=200,
        widget=forms.PasswordInput(render_value=False),
        help_text="PagerDuty: the integration's routing key; webhook: the signing secret. Never shown again, "
        "nor written to the audit trail; leave empty to keep the current one.",
    )

    class Meta:
        model = PagingChannel
        fields = [
            "name",
            "kind",
            "tier",
            "min_severity",
            "escalate_after_minutes",
            "url",
            "secret",
            "recipients",
            "enabled",
        ]

    def clean(self):
        data = super().clean()
        if not data.get("secret") and self.instance.pk:
            data["secret"] = self.instance.secret  # empty: keep the one set before
        kind, url = data.get("kind"), (data.get("url") or "").strip()
        if kind == PagingKind.WEBHOOK and not url:
            self.add_error("url", "A webhook channel needs the receiver's URL.")
        if kind in (PagingKind.WEBHOOK, PagingKind.PAGERDUTY) and not data.get("secret"):
            self.add_error("secret", "PagerDuty needs the routing key; a webhook its signing secret.")
        if kind == PagingKind.EMAIL:
            addresses = [a.strip() for a in (data.get("recipients") or "").split(",") if a.strip()]
            if not addresses:
                self.add_error("recipients", "Give at least one address.")
            elif len(addresses) > 20:
                self.add_error("recipients", "At most 20 addresses.")
            else:
                validator = forms.EmailField()
                for address in addresses:
                    try:
                        validator.clean(address)
                    except forms.ValidationError:
                        self.add_error("recipients", f"{address} is not an e-mail address.")
        if url:
            try:
                check_webhook_url(url)
            except AddressRefused as exc:
                self.add_error("url", exc.detail)
        return data


@admin.register(PagingChannel)
class PagingChannelAdmin(AuditedModelAdmin):
    """Where operators are paged (docs/notifications.md); "Send a test page" goes through the
    outbox like a real page and shows up in the notification log."""

    form = PagingChannelForm
    list_display = ("name", "kind", "tier", "min_severity", "escalate_after_minutes", "enabled")
    list_filter = ("kind", "tier", "enabled")
    actions = ["send_test"]

    @admin.action(description="Send a test page to the selected channels", permissions=["change"])
    def send_test(self, request, queryset):
        if not has_permission(request.user, "paging_channel.manage"):
            self.message_user(request, "Sending a test page needs paging_channel.manage.", messages.ERROR)
            return
        channels = list(queryset[:20])
        for channel in channels:
            send_test_page(channel, actor=actor_label(request.user))
        self.message_user(
            request,
            f"Test page queued for {len(channels)} channel(s); the notification log (/notifications/) shows "
            "whether each was delivered.",
            messages.SUCCESS,
        )
