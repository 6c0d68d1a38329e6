"""Password guessing on the console and admin sign-in pages: locked out after five misses,
and every attempt is in the audit trail."""

import pytest
from django.test import Client

from core.models import AuditEvent

pytestmark = pytest.mark.django_db
LIMIT = 5


@pytest.fixture
def alice(django_user_model):
    return django_user_model.objects.create_user("alice", password="correct-horse-battery", is_staff=True)


def _login(client, password, username="alice", path="/accounts/login/"):
    return client.post(path, {"username": username, "password": password})


def _actions():
    return list(AuditEvent.objects.order_by("at", "id").values_list("action", flat=True))


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
def test_guessing_a_password_locks_that_account_out_from_that_address(alice, path):
    attacker = Client(REMOTE_ADDR="203.0.113.9")
    for i in range(LIMIT - 1):
        response = _login(attacker, f"guess-{i}", path=path)
        assert response.status_code == 200 and "_auth_user_id" not in attacker.session  # the form again
    assert _login(attacker, "guess-last", path=path).status_code == 429  # the fifth miss locks
    locked = _login(attacker, "correct-horse-battery", path=path)  # even the right password now
    assert locked.status_code == 429
    assert "_auth_user_id" not in attacker.session
    actions = _actions()
    assert actions.count("auth.login_failed") >= LIMIT and "auth.locked_out" in actions
    assert "auth.login" not in actions
    failed = AuditEvent.objects.filter(action="auth.login_failed").first()
    assert failed.object_id == str(alice.pk) and failed.after == {"username": "alice", "address": "203.0.113.9"}
    assert "correct-horse" not in str(list(AuditEvent.objects.values_list("after", "reason")))  # no passwords kept


def test_the_owner_from_another_address_still_signs_in_and_it_is_audited(alice):
    attacker = Client(REMOTE_ADDR="203.0.113.9")
    for i in range(LIMIT + 1):
        _login(attacker, f"guess-{i}")
    owner = Client(REMOTE_ADDR="198.51.100.7")
    response = _login(owner, "correct-horse-battery")
    assert response.status_code == 302 and owner.session["_auth_user_id"] == str(alice.pk)
    success = AuditEvent.objects.get(action="auth.login")
    assert success.actor == "user:alice" and success.after["address"] == "198.51.100.7"


def test_a_success_resets_the_count(alice):
    client = Client(REMOTE_ADDR="198.51.100.7")
    for i in range(LIMIT - 1):
        _login(client, f"typo-{i}")
    assert _login(client, "correct-horse-battery").status_code == 302
    client.logout()
    for i in range(LIMIT - 1):
        _login(client, f"typo-again-{i}")
    assert _login(client, "correct-horse-battery").status_code == 302


def test_a_forged_forwarded_for_header_does_not_buy_new_attempts(alice):
    attacker = Client(REMOTE_ADDR="203.0.113.9")
    for i in range(LIMIT):
        attacker.post(
            "/accounts/login/", {"username": "alice", "password": f"g{i}"}, HTTP_X_FORWARDED_FOR=f"10.0.0.{i}"
        )
    response = attacker.post(
        "/accounts/login/", {"username": "alice", "password": "correct-horse-battery"}, HTTP_X_FORWARDED_FOR="10.9.9.9"
    )
    assert response.status_code == 429


def test_failures_for_unknown_usernames_are_audited_too(db):
    _login(Client(REMOTE_ADDR="203.0.113.9"), "x", username="root")
    event = AuditEvent.objects.get(action="auth.login_failed")
    assert event.actor == "user:root" and event.object_id == ""
