"""Admin foundations every app's admin builds on, the audit trail (read-only) and API tokens.

`AuditedModelAdmin` makes every admin add, change (with the field diff), inline change and
delete write the same audit row the console's services write (core.services.audit), with the
actor and the request id. Django's LogEntry is still written; it is not the audit trail.

API tokens are created by a service so the plain value is shown once, on the page that
answers the form (never through the cookie-stored messages); after that a token is read-only
except for revoking it. Rights never exceed the issuer's (core.services.tokens)."""

import datetime
import functools
import uuid
from decimal import Decimal

from django import forms
from django.apps import apps
from django.conf import settings
from django.contrib import admin, messages
from django.contrib.admin.views.main import ChangeList
from django.contrib.admin.widgets import AutocompleteSelect, AutocompleteSelectMultiple
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db import models, transaction
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html

from . import admin_third_party
from .choices import ApiTokenKind
from .errors import Invalid
from .models import ApiToken, AuditEvent
from .search import KINDS, ids_by_kind
from .selectors import distinct_values
from .services.audit import actor_label, record_audit, record_audit_about
from .services.tokens import (
    create_api_token,
    default_expiry,
    issuance_refusal,
    reissue_api_token,
    revoke_api_token,
)


def audit_value(value):
    """A form or model value as JSON the audit row can hold."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, models.Model):
        return str(value)
    if isinstance(value, (Decimal, uuid.UUID)):
        return str(value)
    if isinstance(value, (datetime.date, datetime.datetime, datetime.time)):
        return value.isoformat()
    if isinstance(value, (list, tuple, set, models.QuerySet)):
        return [audit_value(v) for v in value]
    return str(value)


def _initial_value(form, name):
    """What the field held before the edit, readable (a related row by name, not by id)."""
    value = form.initial.get(name)
    field = form.fields.get(name)
    if isinstance(field, forms.ModelChoiceField) and value not in (None, ""):
        if isinstance(field, forms.ModelMultipleChoiceField):
            return [str(v) for v in field.queryset.filter(pk__in=[getattr(v, "pk", v) for v in value])]
        return str(field.queryset.filter(pk=getattr(value, "pk", value)).first())
    return audit_value(value)


SECRET_MARK = "(set)"  # what the audit keeps of a password or credential field: that it was set


def _is_secret(form, name) -> bool:
    field = form.fields.get(name)
    return field is not None and isinstance(field.widget, forms.PasswordInput)


def form_diff(form) -> tuple[dict, dict]:
    """Before and after of the changed fields. A password field (its widget says so) is never
    written down: it appears as "(set)", whatever was typed."""
    before = {name: None if _is_secret(form, name) else _initial_value(form, name) for name in form.changed_data}
    after = {
        name: SECRET_MARK if _is_secret(form, name) else audit_value(form.cleaned_data.get(name))
        for name in form.changed_data
    }
    return before, after


class _ValidatedChoices:
    """An autocomplete widget re-rendering a form looks the submitted value up in the database; a
    value that is not even a valid key (`rack=not-a-uuid`) raised a ValidationError there, a 500
    after the form had already said "Select a valid choice". Such values are left out of that
    lookup; the form's error stands."""

    def optgroups(self, name, value, attr=None):
        target = self.field.target_field
        valid = []
        for item in value:
            try:
                target.to_python(item)
            except (ValidationError, ValueError, TypeError):
                continue
            valid.append(item)
        return super().optgroups(name, valid, attr)


class ValidatedAutocompleteSelect(_ValidatedChoices, AutocompleteSelect):
    pass


class ValidatedAutocompleteSelectMultiple(_ValidatedChoices, AutocompleteSelectMultiple):
    pass


class AuditedModelAdmin(admin.ModelAdmin):
    """The one base of every admin: every write through it lands in the audit trail (add, change
    with the field diff, inline rows, delete), so does every export (`audit_export`) and every
    request it refuses (403: a missing permission, an action the user may not run), with the
    actor and the request id. Secrets are never written down (`form_diff`)."""

    audit_prefix = ""  # defaults to the model name: `rack.admin_update`

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        if "widget" not in kwargs and db_field.name in self.get_autocomplete_fields(request):
            kwargs["widget"] = ValidatedAutocompleteSelect(db_field, self.admin_site, using=kwargs.get("using"))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def formfield_for_manytomany(self, db_field, request, **kwargs):
        if "widget" not in kwargs and db_field.name in self.get_autocomplete_fields(request):
            kwargs["widget"] = ValidatedAutocompleteSelectMultiple(db_field, self.admin_site, using=kwargs.get("using"))
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    def _audit(self, request, action: str, target, *, before=None, after=None, reason: str = "admin") -> None:
        prefix = self.audit_prefix or target._meta.model_name
        record_audit(
            actor=actor_label(request.user),
            action=f"{prefix}.{action}",
            target=target,
            before=before,
            after=after,
            reason=reason,
        )

    def audit_snapshot(self, obj) -> dict:
        """What a delete's audit row keeps of the row (a subclass names the fields that matter)."""
        return {"was": str(obj)}

    def audit_export(self, request, *, fmt: str, rows: dict[str, int], filters: str) -> None:
        """Who exported what and how many rows of each sheet: an export copies inventory (BMC
        addresses, serials) out of the system of record, so it is on the trail like a write."""
        record_audit_about(
            actor=actor_label(request.user),
            action=f"{self.audit_prefix or self.opts.model_name}.admin_export",
            object_type=self.opts.label_lower,
            after={"format": fmt, "rows": rows, "filters": filters[:500]},
            reason="admin export",
        )

    # -- refused requests -----------------------------------------------------------------------
    @property
    def urls(self):
        """Every view of this admin (Django's and a subclass's own, such as import and export)
        audits the requests it refuses."""
        patterns = self.get_urls()
        for pattern in patterns:
            if hasattr(pattern, "callback"):
                pattern.callback = self._audit_refusals(pattern.callback)
        return patterns

    def _audit_refusals(self, view):
        @functools.wraps(view)
        def wrapper(request, *args, **kwargs):
            try:
                return view(request, *args, **kwargs)
            except PermissionDenied as exc:
                record_audit_about(
                    actor=actor_label(request.user),
                    action=f"{self.audit_prefix or self.opts.model_name}.admin_refused",
                    object_type=self.opts.label_lower,
                    object_id=kwargs.get("object_id", ""),
                    after={"method": request.method, "path": request.path[:300], "view": getattr(view, "__name__", "")},
                    reason=(str(exc) or "permission denied")[:500],
                )
                raise

        return wrapper

    def changelist_view(self, request, extra_context=None):
        """An action the user may not run is refused (403, audited), not answered "No action
        selected": the attempt is worth knowing about."""
        name = request.POST.get("action") if request.method == "POST" else None
        if name and name not in self.get_actions(request) and name in self._declared_actions():
            raise PermissionDenied(f"You may not run the action {name!r} on {self.opts.verbose_name_plural}.")
        return super().changelist_view(request, extra_context)

    def _declared_actions(self) -> set[str]:
        names = set(self.admin_site._actions)
        for base in type(self).__mro__:
            for action in getattr(base, "actions", None) or ():
                names.add(action if isinstance(action, str) else getattr(action, "__name__", ""))
        return names

    def save_model(self, request, obj, form, change):
        before, after = form_diff(form)
        with transaction.atomic():
            super().save_model(request, obj, form, change)
            if change and not form.changed_data:
                return
            self._audit(
                request,
                "admin_update" if change else "admin_create",
                obj,
                before=before if change else None,
                after=after,
            )

    def save_formset(self, request, form, formset, change):
        with transaction.atomic():
            super().save_formset(request, form, formset, change)
            for obj in formset.new_objects:
                self._audit(request, "admin_create", obj, after={"via": str(form.instance)})
            for obj, changed in formset.changed_objects:
                self._audit(request, "admin_update", obj, after={"fields": list(changed)})
            for obj in formset.deleted_objects:
                self._audit(request, "admin_delete", obj, before=self.audit_snapshot(obj))

    def delete_model(self, request, obj):
        with transaction.atomic():
            self._audit(request, "admin_delete", obj, before=self.audit_snapshot(obj))
            super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            for obj in queryset:
                self._audit(request, "admin_delete", obj, before=self.audit_snapshot(obj))
            super().delete_queryset(request, queryset)


def search_kinds() -> dict[str, str]:
    """Identifier kind → the label of the model that carries it (`fleet.node`), from the search
    registry: what an identifier typed in the audit search names."""
    return {name: entry.model._meta.label_lower for name, (_kind, entry) in KINDS.items()}


class CappedCountPaginator(Paginator):
    """Counts at most CAP + 1 rows (COUNT over a LIMITed subquery): a changelist of a million
    GPUs pages without counting them all. Past the cap the page links stop; filter or search."""

    CAP = 10_000

    @property
    def count(self) -> int:
        if not hasattr(self, "_capped_count"):
            # unordered: which rows fall under the cap does not change the count, and an ORDER BY
            # in the subquery made the database sort every match first (250 ms for a prefix search
            # of the audit trail naming a thousand nodes)
            self._capped_count = self.object_list.order_by()[: self.CAP + 1].count()
        return self._capped_count


class SortableOnlyChangeList(ChangeList):
    """A changelist that sorts only by the columns in `sortable_by`: Django hides the other
    headers' links but still sorts by any `?o=<column>` a URL names, and on a big table that
    is a sort of every row."""

    def get_ordering_field(self, field_name):
        sortable = self.model_admin.sortable_by
        if sortable is not None and field_name not in sortable:
            return None
        return super().get_ordering_field(field_name)


class AtScaleAdmin(admin.ModelAdmin):
    """Lists that stay quick at a million rows: no full count, a capped paginator, and search
    through the search index (core.search: exact and prefix on normalised identifiers) rather
    than `icontains` over joins with DISTINCT.

    `index_search` maps an identifier kind to how its object ids select this admin's rows: a
    lookup path to the matched id (`"pk"`, `"node_id"`) or a function ids → Q (for a match on a
    related row, as a semi-join subquery that cannot duplicate rows)."""

    show_full_result_count = False
    paginator = CappedCountPaginator
    index_search: dict = {}

    def get_changelist(self, request, **kwargs):
        return SortableOnlyChangeList

    INDEX_SEARCH_LIMIT = 1000  # identifiers matched per search; a broader prefix narrows nothing anyway

    def get_index_search(self, request) -> dict:
        """The identifier kinds this user's search matches (a subclass leaves out kinds that
        belong to records the user may not view)."""
        return self.index_search

    def get_search_results(self, request, queryset, search_term):
        index_search = self.get_index_search(request)
        if not index_search or not search_term.strip():
            return super().get_search_results(request, queryset, search_term)
        try:
            found = ids_by_kind(search_term, list(index_search), limit=self.INDEX_SEARCH_LIMIT)
        except Invalid as exc:
            self.message_user(request, exc.detail, messages.ERROR)
            return queryset.none(), False
        condition = models.Q(pk__in=[])
        for kind, ids in found.items():
            target = index_search[kind]
            condition |= target(ids) if callable(target) else models.Q(**{f"{target}__in": ids})
        return queryset.filter(condition), False

    def get_formset_kwargs(self, request, obj, inline, prefix):
        """An inline with `max_rows` (and `paged_by`, its foreign key to this object) shows only
        its first rows in its own order — a node's latest events, not its whole history."""
        kwargs = super().get_formset_kwargs(request, obj, inline, prefix)
        max_rows = getattr(inline, "max_rows", None)
        if max_rows and obj is not None and obj.pk is not None:
            rows = inline.get_queryset(request)
            first = rows.filter(**{inline.paged_by: obj}).values("pk")[:max_rows]
            kwargs["queryset"] = rows.filter(pk__in=first)  # a LIMITed subquery: one query, whatever the history
        return kwargs


class ReadOnlyAdmin(AuditedModelAdmin):
    """Rows written only by services (which audit them): viewable here, never added, changed or
    deleted. On the audited base all the same, so an attempt to write is on the trail."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class IndexWalkFilter(admin.SimpleListFilter):
    """A filter on an indexed column whose choices are read by walking the index
    (core.selectors.distinct_values), never by DISTINCT over the table."""

    def lookups(self, request, model_admin):
        values = distinct_values(model_admin.model, self.parameter_name)
        chosen = self.value()
        if chosen and chosen not in values:  # a value from a link (an object's audit rows) stays listed
            values.append(chosen)
        return [(v, v) for v in values]

    def queryset(self, request, queryset):
        value = self.value()
        return queryset.filter(**{self.parameter_name: value}) if value else queryset


class AuditActionFilter(IndexWalkFilter):
    title = "action"
    parameter_name = "action"


class AuditObjectTypeFilter(IndexWalkFilter):
    title = "object type"
    parameter_name = "object_type"


@admin.register(AuditEvent)
class AuditEventAdmin(ReadOnlyAdmin, AtScaleAdmin):
    """The trail at a million rows: every filter and search reads one index in the list's order
    (core_audit_*_idx) and stops at the page; the paginator counts at most 10,001 rows; the
    choices of the filters are index walks; dates are a fixed range filter (no year drill, which
    needs DISTINCT over the dates and MIN/MAX over the rows). `?object_type=…&object_id=…` lists
    one object's rows (every object's admin page links there)."""

    list_display = ("at", "actor", "action", "object_link", "short_reason")
    list_filter = (("at", admin.DateFieldListFilter), AuditActionFilter, AuditObjectTypeFilter)
    search_fields = ("object_id",)  # the search box; get_search_results says what it matches
    search_help_text = (
        "An actor (user:NAME, or just NAME), a request id or an object id, exactly; or the exact or first "
        "characters of an identifier (hostname, serial, GPU UUID, rack, tenant …) to list that object's rows."
    )
    sortable_by = ("at",)
    list_per_page = 100

    def lookup_allowed(self, lookup, value, request=None):
        return lookup in ("object_id", "actor", "request_id") or super().lookup_allowed(lookup, value, request)

    @admin.display(description="object")
    def object_link(self, event):
        """The object's admin page when it has one (no query: the id is on the row)."""
        label = f"{event.object_type}:{event.object_id}" if event.object_id else event.object_type
        try:
            model = apps.get_model(event.object_type)
        except (LookupError, ValueError):
            return label
        if not event.object_id or not admin.site.is_registered(model):
            return label
        url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[event.object_id])
        return format_html('<a href="{}">{}</a>', url, label)

    @admin.display(description="reason")
    def short_reason(self, event):
        return event.reason if len(event.reason) <= 120 else event.reason[:119] + "…"

    def get_search_results(self, request, queryset, search_term):
        """One condition, on one index: the first of an actor (`user:NAME`, or `NAME` for a
        user), a request id, an object id that has rows, else the objects an identifier names.
        Never an OR of them: PostgreSQL would walk the whole trail newest-first filtering rows
        (86 ms for a common actor, a table scan for a rare one) rather than use each index."""
        term = search_term.strip()
        if not term:
            return queryset, False
        candidates = [("actor", term if ":" in term else f"user:{term}")]
        if ":" not in term:
            candidates.append(("actor", term))
        candidates += [("request_id", term), ("object_id", term)]
        for column, value in candidates:
            limit = AuditEvent._meta.get_field(column).max_length
            if len(value) <= limit and AuditEvent.objects.filter(**{column: value}).exists():
                return queryset.filter(**{column: value}), False
        try:  # an identifier: the object it names, through the search index (exact or prefix)
            found = ids_by_kind(term, list(search_kinds()), limit=self.INDEX_SEARCH_LIMIT)
        except Invalid as exc:
            self.message_user(request, exc.detail, messages.ERROR)
            return queryset.none(), False
        by_type: dict[str, list[str]] = {}
        for kind, ids in found.items():
            by_type.setdefault(search_kinds()[kind], []).extend(str(i) for i in ids)
        condition = models.Q(pk__in=[])
        for object_type, ids in by_type.items():
            condition |= models.Q(object_type=object_type, object_id__in=ids)
        return queryset.filter(condition), False


class ApiTokenCreateForm(forms.ModelForm):
    """Only the shape and the issuer's rights are checked here; the service checks them again."""

    class Meta:
        model = ApiToken
        fields = ("kind", "name", "tenant", "user", "role", "expires_at")

    def __init__(self, *args, issuer=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.issuer = issuer
        if "expires_at" in self.fields:
            self.fields["expires_at"].initial = default_expiry()
            self.fields["expires_at"].help_text = (
                f"new tokens expire after {settings.API_TOKEN_LIFETIME_DAYS} days by default; empty: never "
                "(an operator token acts only with the rights its user holds now, never more later)"
            )

    def clean(self):
        data = super().clean()
        kind, tenant, user, role = data.get("kind"), data.get("tenant"), data.get("user"), data.get("role")
        if kind == ApiTokenKind.TENANT:
            if tenant is None:
                self.add_error("tenant", "A tenant token needs a tenant.")
            if not role:
                self.add_error("role", "A tenant token needs a role: admin, member or viewer.")
            if user is not None:
                self.add_error("user", "A tenant token belongs to its tenant; leave the user empty.")
        elif kind == ApiTokenKind.OPERATOR:
            if user is None:
                self.add_error("user", "An operator token needs a staff user.")
            elif not (user.is_staff and user.is_active):
                self.add_error(
                    "user",
                    f"{user.get_username()} is not an active staff user; an operator token acts as "
                    "its user in the ops API. Give them staff status first.",
                )
            if tenant is not None:
                self.add_error("tenant", "An operator token has no tenant; leave it empty.")
            if role:
                self.add_error("role", "An operator token has no tenant role; leave it empty.")
        if kind and self.issuer is not None:
            refusal = issuance_refusal(issuer=self.issuer, kind=kind, user=user)
            if refusal:
                raise ValidationError(refusal)
        return data


class ApiTokenRevokeForm(forms.ModelForm):
    revoke_now = forms.BooleanField(
        required=False,
        label="Revoke",
        help_text="Revoke this token now. A revoked token cannot be restored; use 'Revoke and reissue' to replace it.",
    )

    class Meta:
        model = ApiToken
        fields = ()


@admin.register(ApiToken)
class ApiTokenAdmin(AuditedModelAdmin):
    audit_prefix = "token"
    list_display = (
        "prefix",
        "kind",
        "name",
        "tenant",
        "user",
        "role",
        "scope",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    )
    list_filter = ("kind", "role")
    search_fields = ("name", "prefix", "tenant__slug", "user__username")
    list_select_related = ("tenant", "user")
    actions = ["revoke", "revoke_and_reissue"]
    raw_id_fields = ("user", "tenant")
    TOKEN_FIELDS = (
        "kind",
        "name",
        "tenant",
        "user",
        "role",
        "scope",
        "prefix",
        "created_at",
        "last_used_at",
        "expires_at",
        "revoked_at",
    )

    @admin.display(description="scope")
    def scope(self, token):
        """What an operator token may do: the rights at issue (as far as its user still holds them)."""
        if token.kind != ApiTokenKind.OPERATOR:
            return f"tenant {token.role}"
        if token.scope_superuser:
            return "superuser"
        return ", ".join(token.scope_permissions) or "read only (no permissions)"

    def get_form(self, request, obj=None, change=False, **kwargs):
        if obj is not None:
            return super().get_form(request, obj, change=change, form=ApiTokenRevokeForm, **kwargs)
        base = super().get_form(request, obj, change=change, form=ApiTokenCreateForm, **kwargs)

        class IssuerBoundForm(base):
            def __init__(self, *args, **kw):
                super().__init__(*args, issuer=request.user, **kw)

        return IssuerBoundForm

    def get_fields(self, request, obj=None):
        if obj is None:
            return ApiTokenCreateForm.Meta.fields
        if obj.revoked_at is None and self.has_change_permission(request, obj):
            return (*self.TOKEN_FIELDS, "revoke_now")
        return self.TOKEN_FIELDS

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.TOKEN_FIELDS

    def save_model(self, request, obj, form, change):
        actor = actor_label(request.user)
        if change:
            if form.cleaned_data.get("revoke_now"):
                revoke_api_token(token=obj, actor=actor, reason="revoked in the admin")
            return
        token, plain = create_api_token(
            kind=obj.kind,
            tenant=obj.tenant,
            user=obj.user,
            role=obj.role,
            name=obj.name,
            actor=actor,
            issuer=request.user,
            expires_at=form.cleaned_data.get("expires_at"),
        )
        obj.pk = token.pk
        obj._state.adding = False
        request._issued_tokens = [(token, plain)]

    def save_related(self, request, form, formsets, change):
        """A token has no related rows; the form's m2m save would re-save the row."""

    def log_addition(self, request, obj, message):
        return None  # the audit row is written by the service

    def response_add(self, request, obj, post_url_continue=None):
        return self._issued_page(request, getattr(request, "_issued_tokens", []))

    def _issued_page(self, request, issued):
        response = TemplateResponse(
            request,
            "admin/core/apitoken/issued.html",
            {
                **self.admin_site.each_context(request),
                "title": "Token issued",
                "issued": issued,
                "opts": self.opts,
            },
        )
        response["Cache-Control"] = "no-store"
        return response

    def delete_model(self, request, obj):
        with transaction.atomic():
            self._audit(request, "delete", obj, before={"kind": obj.kind, "prefix": obj.prefix, "owner": str(obj)})
            admin.ModelAdmin.delete_model(self, request, obj)

    def delete_queryset(self, request, queryset):
        with transaction.atomic():
            for obj in queryset:
                self._audit(request, "delete", obj, before={"kind": obj.kind, "prefix": obj.prefix, "owner": str(obj)})
            admin.ModelAdmin.delete_queryset(self, request, queryset)

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke(self, request, queryset):
        actor = actor_label(request.user)
        count = 0
        for token in queryset.filter(revoked_at__isnull=True):
            revoke_api_token(token=token, actor=actor, reason="revoked in the admin")
            count += 1
        self.message_user(request, f"{count} token(s) revoked.", messages.SUCCESS)

    @admin.action(
        description="Revoke and reissue selected tokens (shows the new values once)", permissions=["add", "change"]
    )
    def revoke_and_reissue(self, request, queryset):
        actor = actor_label(request.user)
        tokens = list(queryset.filter(revoked_at__isnull=True).select_related("user", "tenant"))
        for token in tokens:
            refusal = issuance_refusal(issuer=request.user, kind=token.kind, user=token.user)
            if refusal:
                self.message_user(request, f"Nothing reissued: {token}: {refusal}", messages.ERROR)
                return None
        with transaction.atomic():
            issued = [reissue_api_token(token=token, actor=actor, issuer=request.user) for token in tokens]
        return self._issued_page(request, issued)


def _declare_missing_action_permissions(site) -> None:
    """Actions of third-party admins (django-celery-beat's enable/disable/run tasks) declare no
    permission, so Django offers them to view-only users: they need change, like ours."""
    for model_admin in site._registry.values():
        for action in model_admin.actions or ():
            func = getattr(type(model_admin), action, None) if isinstance(action, str) else action
            func = getattr(func, "__func__", func)
            if callable(func) and not getattr(func, "allowed_permissions", None):
                func.allowed_permissions = ("change",)


admin_third_party.register(admin.site, AuditedModelAdmin)
_declare_missing_action_permissions(admin.site)
