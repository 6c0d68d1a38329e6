"""API tokens in the admin: issued once (the value never passes through the messages cookie),
read-only afterwards except revoking, revoke-and-reissue instead of edits, every create,
revoke and delete audited, and never more rights than the issuer holds."""

import pytest
from django.test import Client
from django.urls import reverse

from core.models import ApiToken, AuditEvent
from core.services.tokens import create_api_token
from tenants.services.tenants import create_tenant
from tests.fleet.admin_helpers import client_for, staff_with

pytestmark = pytest.mark.django_db
ADD = "admin:core_apitoken_add"


@pytest.fixture
def root(django_user_model):
    return staff_with(django_user_model, "root", is_superuser=True)


@pytest.fixture
def tenant(db):
    return create_tenant(slug="acme", name="Acme", max_nodes=8, actor="test")[0]


def _form_errors(response) -> str:
    assert response.status_code == 200
    form = response.context["adminform"].form
    return " ".join(str(e) for errs in form.errors.values() for e in errs)


def test_a_user_with_only_add_apitoken_cannot_mint_a_token_for_a_superuser(root, django_user_model):
    minter = client_for(Client, staff_with(django_user_model, "minter", "core.add_apitoken", "core.view_apitoken"))
    response = minter.post(reverse(ADD), {"kind": "operator", "user": root.pk, "name": "escalate"})
    assert "only a superuser may issue" in _form_errors(response)
    assert not ApiToken.objects.exists()


def test_a_token_for_a_user_with_more_permissions_than_the_issuer_is_refused(django_user_model):
    strong = staff_with(django_user_model, "strong", "fleet.change_node", "fleet.view_node")
    minter = client_for(Client, staff_with(django_user_model, "minter", "core.add_apitoken", "fleet.view_node"))
    response = minter.post(reverse(ADD), {"kind": "operator", "user": strong.pk})
    assert "fleet.change_node" in _form_errors(response)
    assert not ApiToken.objects.exists()


def test_an_issuer_may_mint_an_operator_token_for_themselves(django_user_model):
    me = staff_with(django_user_model, "me", "core.add_apitoken", "core.view_apitoken")
    response = client_for(Client, me).post(reverse(ADD), {"kind": "operator", "user": me.pk})
    assert response.status_code == 200 and response.context["issued"]
    assert ApiToken.objects.get().user == me


def test_a_tenant_token_needs_the_right_to_administer_tenants(tenant, django_user_model):
    minter = client_for(Client, staff_with(django_user_model, "minter", "core.add_apitoken"))
    response = minter.post(reverse(ADD), {"kind": "tenant", "tenant": tenant.pk, "role": "admin"})
    assert "tenants.change_tenant" in _form_errors(response)


@pytest.mark.parametrize(
    "make_data, message",
    [
        (lambda root, tenant, plain: {"kind": "operator", "user": plain.pk}, "not an active staff user"),
        (lambda root, tenant, plain: {"kind": "tenant", "tenant": tenant.pk, "role": ""}, "needs a role"),
        (lambda root, tenant, plain: {"kind": "tenant", "role": "admin"}, "needs a tenant"),
        (lambda root, tenant, plain: {"kind": "operator", "user": root.pk, "tenant": tenant.pk}, "has no tenant"),
        (
            lambda root, tenant, plain: {"kind": "tenant", "tenant": tenant.pk, "role": "admin", "user": root.pk},
            "leave the user empty",
        ),
    ],
)
def test_invalid_token_combinations_are_form_errors_not_500s(root, tenant, django_user_model, make_data, message):
    plain = django_user_model.objects.create_user("plain", password="x" * 12)
    response = client_for(Client, root).post(reverse(ADD), make_data(root, tenant, plain))
    assert message in _form_errors(response)
    assert not ApiToken.objects.exists()


def test_the_plain_value_is_shown_once_on_the_page_and_never_in_a_cookie(root):
    client = client_for(Client, root)
    response = client.post(reverse(ADD), {"kind": "operator", "user": root.pk, "name": "ci"})
    assert response.status_code == 200
    [(token, plain)] = response.context["issued"]
    assert plain.startswith("hgo_") and plain in response.content.decode()
    assert "no-store" in response["Cache-Control"]
    assert all(plain not in morsel.value for morsel in response.cookies.values())
    assert plain not in client.get(reverse("admin:core_apitoken_change", args=[token.pk])).content.decode()
    assert plain not in client.get(reverse("admin:core_apitoken_changelist")).content.decode()
    assert AuditEvent.objects.filter(action="token.create", object_id=str(token.pk), actor="user:root").exists()


def test_an_issued_token_cannot_be_edited_only_revoked(root, tenant):
    token, _ = create_api_token(kind="tenant", tenant=tenant, role="viewer", actor="test")
    other = create_tenant(slug="globex", name="Globex", max_nodes=8, actor="test")[0]
    client = client_for(Client, root)
    url = reverse("admin:core_apitoken_change", args=[token.pk])
    response = client.post(url, {"kind": "tenant", "tenant": other.pk, "role": "admin", "name": "renamed"})
    assert response.status_code == 302
    token.refresh_from_db()
    assert (token.tenant_id, token.role, token.name, token.revoked_at) == (tenant.pk, "viewer", "", None)
    client.post(url, {"revoke_now": "on"})
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert AuditEvent.objects.filter(action="token.revoke", object_id=str(token.pk), actor="user:root").exists()


def test_revoke_and_reissue_replaces_the_token_and_shows_the_new_value_once(root):
    token, old_plain = create_api_token(kind="operator", user=root, actor="test", name="deploy")
    client = client_for(Client, root)
    response = client.post(
        reverse("admin:core_apitoken_changelist"), {"action": "revoke_and_reissue", "_selected_action": [token.pk]}
    )
    assert response.status_code == 200
    [(new_token, new_plain)] = response.context["issued"]
    token.refresh_from_db()
    assert token.revoked_at is not None and new_token.revoked_at is None and new_plain != old_plain
    assert (new_token.kind, new_token.user, new_token.name) == ("operator", root, "deploy")
    assert "no-store" in response["Cache-Control"]


def test_the_revoke_action_is_audited_and_needs_change(root, django_user_model):
    token, _ = create_api_token(kind="operator", user=root, actor="test")
    changer = staff_with(django_user_model, "changer", "core.view_apitoken", "core.change_apitoken")
    client_for(Client, changer).post(
        reverse("admin:core_apitoken_changelist"), {"action": "revoke", "_selected_action": [token.pk]}
    )
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert AuditEvent.objects.filter(action="token.revoke", actor="user:changer").exists()


def test_deleting_a_token_is_audited(root):
    token, _ = create_api_token(kind="operator", user=root, actor="test")
    response = client_for(Client, root).post(reverse("admin:core_apitoken_delete", args=[token.pk]), {"post": "yes"})
    assert response.status_code == 302
    assert not ApiToken.objects.filter(pk=token.pk).exists()
    assert AuditEvent.objects.filter(action="token.delete", object_id=str(token.pk), actor="user:root").exists()
