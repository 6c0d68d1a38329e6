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


# ---- two limits together; what the lockout answer says; inputs no account has ---------------


def test_spraying_one_password_over_25_usernames_from_one_address_is_limited(django_user_model, settings):
    for i in range(25):
        django_user_model.objects.create_user(f"user{i:02d}", password="correct-horse-battery", is_staff=True)
    sprayer = Client(REMOTE_ADDR="203.0.113.50")
    statuses = [_login(sprayer, "Summer2026!", username=f"user{i:02d}").status_code for i in range(25)]
    limit = settings.LOGIN_ADDRESS_FAILURE_LIMIT
    assert statuses[: limit - 1] == [200] * (limit - 1) and set(statuses[limit - 1 :]) == {429}
    # everyone else still signs in
    assert _login(Client(REMOTE_ADDR="198.51.100.8"), "correct-horse-battery", username="user24").status_code == 302


def test_one_persons_typos_do_not_lock_out_their_colleagues_behind_the_same_address(alice, django_user_model):
    django_user_model.objects.create_user("bob", password="another-long-passphrase", is_staff=True)
    office = Client(REMOTE_ADDR="198.51.100.20")
    for i in range(LIMIT):
        _login(office, f"typo-{i}")
    assert _login(office, "correct-horse-battery").status_code == 429  # alice from here: locked
    colleague = Client(REMOTE_ADDR="198.51.100.20")
    assert _login(colleague, "another-long-passphrase", username="bob").status_code == 302


def test_the_lockout_says_when_to_try_again(alice, settings):
    attacker = Client(REMOTE_ADDR="203.0.113.9")
    for i in range(LIMIT):
        response = _login(attacker, f"guess-{i}")
    assert response.status_code == 429
    assert int(response["Retry-After"]) == int(settings.AXES_COOLOFF_TIME.total_seconds())
    assert "Try again in 15 minutes" in response.content.decode()


@pytest.mark.parametrize("path", ["/accounts/login/", "/admin/login/"])
@pytest.mark.parametrize("length", [151, 255, 256, 10_000])
def test_a_username_longer_than_any_account_is_a_400(db, path, length):
    response = _login(Client(REMOTE_ADDR="203.0.113.9"), "x", username="u" * length, path=path)
    assert response.status_code == 400
    assert not AuditEvent.objects.filter(action="auth.login_failed").exists()


@pytest.mark.parametrize(
    ("password", "why"),
    [
        ("short-pw", "too short"),
        ("password1234", "too common"),
        ("123456789012345", "entirely numeric"),
        ("alice-the-operator", "too similar"),
    ],
)
def test_passwords_are_held_to_djangos_validators(django_user_model, password, why):
    from django.contrib.auth.password_validation import validate_password
    from django.core.exceptions import ValidationError

    user = django_user_model(username="alice-the-operator")
    with pytest.raises(ValidationError) as refused:
        validate_password(password, user)
    assert why in " ".join(refused.value.messages)
    validate_password("Vq8-tundra-lantern-47", user)


def test_behind_the_configured_proxy_each_client_is_judged_by_its_own_address(alice, django_user_model, settings):
    """With NUM_PROXIES and TRUSTED_PROXIES set, X-Forwarded-For from the proxy names the client:
    one client's wrong passwords lock that client, not everyone behind the proxy."""
    import ipaddress

    settings.NUM_PROXIES = 1
    settings.TRUSTED_PROXIES = (ipaddress.ip_network("10.1.0.0/24"),)
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "NUM_PROXIES": 1}
    django_user_model.objects.create_user("bob", password="another-long-passphrase", is_staff=True)
    proxy = Client(REMOTE_ADDR="10.1.0.5")
    for i in range(LIMIT):
        proxy.post("/accounts/login/", {"username": "alice", "password": f"g{i}"}, HTTP_X_FORWARDED_FOR="198.51.100.1")
    locked = proxy.post(
        "/accounts/login/",
        {"username": "alice", "password": "correct-horse-battery"},
        HTTP_X_FORWARDED_FOR="198.51.100.1",
    )
    assert locked.status_code == 429
    other = Client(REMOTE_ADDR="10.1.0.5")
    fine = other.post(
        "/accounts/login/",
        {"username": "alice", "password": "correct-horse-battery"},
        HTTP_X_FORWARDED_FOR="198.51.100.2",
    )
    assert fine.status_code == 302
    failed = AuditEvent.objects.filter(action="auth.login_failed").first()
    assert failed.after["address"] == "198.51.100.1"  # the client's, not the proxy's
