"""Admin of the BMC records: address, MAC, Redfish URL, TLS trust and credentials (write-only:
the form never shows the stored ones, and saves through fleet.services.bmc_credentials.set_bmc,
audited: addresses outside the BMC networks are refused, and a new address without new
credentials clears the stored ones), and power actions on selected nodes after a confirmation
page naming them."""

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from core.admin import AtScaleAdmin, AuditedModelAdmin, ReadOnlyAdmin
from core.errors import DomainError
from core.services.audit import actor_label
from core.services.permissions import PermissionMissing

from ..choices import PowerAction
from ..models import BMCPowerAction, NodeBMC
from ..services.bmc_credentials import clean_redfish_url, clean_system_path, set_bmc
from ..services.bmc_network import check_bmc_address, check_redfish_url
from ..services.power_actions import perform_power_action
from ..validators import validate_bmc_address


class NodeBMCForm(forms.ModelForm):
    redfish_url = forms.CharField(
        max_length=300,
        required=False,
        help_text="the BMC's Redfish service, e.g. https://10.1.2.3; changing it without new credentials clears them",
    )
    username = forms.CharField(
        max_length=256, required=False, help_text="leave both empty to keep the stored credentials"
    )
    password = forms.CharField(
        max_length=256, required=False, widget=forms.PasswordInput(render_value=False), strip=False
    )

    class Meta:
        model = NodeBMC
        fields = ["node", "address", "mac", "redfish_url", "system_path", "tls_ca_pem", "tls_pin_sha256"]

    def clean_address(self):
        value = (self.cleaned_data.get("address") or "").strip()
        if value:
            validate_bmc_address(value)  # what it is first (a MAC, a zone-scoped address), then where
        _checked(check_bmc_address, value)
        return value

    def clean_redfish_url(self):
        """Its shape (no credentials in it) first, then the network policy. An empty address is
        allowed: a record may hold only the BMC's address and MAC until its Redfish service is known."""
        value = (self.cleaned_data.get("redfish_url") or "").strip()
        if not value:
            return ""
        url = _checked(clean_redfish_url, value)
        _checked(check_redfish_url, url)
        return url

    def clean_system_path(self):
        return _checked(clean_system_path, self.cleaned_data.get("system_path", ""))

    def clean(self):
        data = super().clean()
        if bool(data.get("username")) != bool(data.get("password")):
            raise forms.ValidationError("Give both the username and the password, or neither to keep the stored ones.")
        if data.get("username") and not data.get("redfish_url"):
            raise forms.ValidationError("Credentials need the Redfish address they are for.")
        return data


def _checked(check, value):
    """The service's own check of a field, as a form error: the form refuses what set_bmc would
    (credentials in the URL, a path outside /redfish/v1/Systems/, an address outside the BMC
    networks), rather than saying "added"."""
    try:
        return check(value)
    except DomainError as exc:
        raise forms.ValidationError(exc.detail) from None


@admin.register(NodeBMC)
class NodeBMCAdmin(AuditedModelAdmin, AtScaleAdmin):
    """Audited: set_bmc writes `node.bmc_set` for an add or change and a delete writes
    `nodebmc.admin_delete`, each with `credentials_set`, never the credentials."""

    form = NodeBMCForm
    list_display = (
        "node",
        "address",
        "redfish_url",
        "system_path",
        "reachable",
        "desired_power",
        "drift_since",
        "last_error_kind",
    )
    list_filter = ("reachable", "last_error_kind", "desired_power")
    search_fields = ("node__hostname", "address", "redfish_url")
    # at scale: searched by hostname, BMC address or MAC through the index, counted up to a cap,
    # and not sorted by a column without an index (the node column sorts by a join over every record)
    index_search = {"hostname": "node_id", "bmc_address": "pk", "bmc_mac": "pk"}
    search_help_text = "Exact or first characters of the node's hostname, or of the BMC's address or MAC."
    sortable_by = ()
    list_select_related = ("node",)
    autocomplete_fields = ("node",)
    readonly_fields = (
        "credentials_changed_at",
        "credentials_origin",
        "reachable",
        "last_checked_at",
        "last_ok_at",
        "last_error",
        "last_error_kind",
        "desired_power",
        "drift_since",
    )
    actions = ["power_on", "power_off", "power_cycle"]

    def get_readonly_fields(self, request, obj=None):
        return (*self.readonly_fields, "node", "links") if obj else self.readonly_fields

    @admin.display(description="see also")
    def links(self, bmc):
        """BMC record ↔ node ↔ console page ↔ audit rows (set_bmc writes them on the node)."""
        audit = reverse("admin:core_auditevent_changelist")
        return format_html(
            '<a href="{}">node {}</a> · <a href="{}">console page</a> · <a href="{}">audit rows of the node</a> · '
            '<a href="{}">of this record</a>',
            reverse("admin:fleet_node_change", args=[bmc.node_id]),
            bmc.node,
            reverse("fleet:node-detail", args=[bmc.node_id]),
            f"{audit}?object_type=fleet.node&object_id={bmc.node_id}",
            f"{audit}?object_type=fleet.nodebmc&object_id={bmc.pk}",
        )

    def save_model(self, request, obj, form, change):
        data = form.cleaned_data
        try:
            saved = set_bmc(
                node=obj.node,
                redfish_url=data.get("redfish_url") or "",
                system_path=data.get("system_path", ""),
                username=data.get("username") or None,
                password=data.get("password") or None,
                address=data.get("address") or "",
                mac=data.get("mac") or "",
                tls_ca_pem=data.get("tls_ca_pem") or "",
                tls_pin_sha256=data.get("tls_pin_sha256") or "",
                actor=actor_label(request.user),
                reason="set in the admin",
            )
        except DomainError as exc:
            request._bmc_refused = exc.detail  # answered by response_add/response_change: nothing saved
            return
        obj.pk = saved.pk

    def audit_snapshot(self, obj) -> dict:
        return {
            "node": str(obj.node),
            "redfish_url": obj.redfish_url,
            "system_path": obj.system_path,
            "address": obj.address,
            "mac": obj.mac,
            "credentials_set": obj.has_credentials,
        }

    def _refused_answer(self, request):
        self.message_user(request, f"Nothing was saved: {request._bmc_refused}", messages.ERROR)
        return HttpResponseRedirect(request.get_full_path())

    def response_add(self, request, obj, post_url_continue=None):
        if getattr(request, "_bmc_refused", None):
            return self._refused_answer(request)
        return super().response_add(request, obj, post_url_continue)

    def response_change(self, request, obj):
        if getattr(request, "_bmc_refused", None):
            return self._refused_answer(request)
        return super().response_change(request, obj)

    def log_addition(self, request, obj, message):
        return None if getattr(request, "_bmc_refused", None) else super().log_addition(request, obj, message)

    def _power(self, request, queryset, action: str):
        """A confirmation page first (it names every node), then each node's action."""
        if request.POST.get("confirm") != "yes":
            return TemplateResponse(
                request,
                "admin/fleet/power_confirm.html",
                {
                    **self.admin_site.each_context(request),
                    "title": f"{PowerAction(action).label} {queryset.count()} node(s)?",
                    "bmcs": queryset.select_related("node"),
                    "action": action,
                    "admin_action": request.POST.get("action"),
                    "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
                    "opts": self.model._meta,
                },
            )
        done, refused = 0, []
        for bmc in queryset.select_related("node"):
            try:
                result = perform_power_action(
                    node=bmc.node, action=action, actor=actor_label(request.user), reason="admin", user=request.user
                )
            except PermissionMissing as exc:
                self.message_user(request, exc.detail, messages.ERROR)
                return None
            except DomainError as exc:
                refused.append(f"{bmc.node.hostname}: {exc.detail}")
                continue
            if result.state == "failed":
                refused.append(f"{bmc.node.hostname}: {result.detail}")
            else:
                done += 1
        if done:
            self.message_user(request, f"{PowerAction(action).label}: {done} node(s) accepted by their BMC.")
        for line in refused[:20]:
            self.message_user(request, line, messages.WARNING)
        return None

    @admin.action(description="Power on selected nodes", permissions=["change"])
    def power_on(self, request, queryset):
        return self._power(request, queryset, PowerAction.POWER_ON)

    @admin.action(description="Power off selected nodes (graceful shutdown)", permissions=["change"])
    def power_off(self, request, queryset):
        return self._power(request, queryset, PowerAction.POWER_OFF)

    @admin.action(description="Power cycle selected nodes", permissions=["change"])
    def power_cycle(self, request, queryset):
        return self._power(request, queryset, PowerAction.POWER_CYCLE)


@admin.register(BMCPowerAction)
class BMCPowerActionAdmin(ReadOnlyAdmin, AtScaleAdmin):
    list_display = ("node", "action", "state", "requested_by", "created_at", "reset_type", "detail")
    sortable_by = ()
    list_filter = ("state", "action")
    search_fields = ("node__hostname",)
