"""Creating and revoking API tokens (tenant and operator). Agent tokens are minted from the
node id and the signing key; see core.api.agent_tokens.

An operator token carries its own scope: the rights its user held at issue (which issuance
already bounds by the issuer's). New tokens expire after API_TOKEN_LIFETIME_DAYS unless the
issuer chooses another time (or none)."""

from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.api.authentication import generate_plain_token, token_digest
from core.choices import ApiTokenKind, TenantRole
from core.models import ApiToken

from .audit import record_audit


def issuance_refusal(*, issuer, kind: str, user=None) -> str | None:
    """Why `issuer` may not mint this token (None when they may). A token never carries more
    than its issuer holds: an operator token acts with its user's permissions, so only a
    superuser issues one for a superuser, and anyone else only for a user whose permissions
    are a subset of their own. Tenant tokens administer a tenant: they need tenants.change_tenant."""
    if not (issuer.is_active and issuer.is_staff and issuer.has_perm("core.add_apitoken")):
        return "Issuing API tokens needs the core.add_apitoken permission."
    if kind == ApiTokenKind.TENANT:
        if not issuer.has_perm("tenants.change_tenant"):
            return "Issuing a tenant token needs the tenants.change_tenant permission."
        return None
    if user is None:
        return None  # the shape check below says what is missing
    if issuer.is_superuser:
        return None
    if user.is_superuser:
        return f"{user.get_username()} is a superuser; only a superuser may issue a token that acts as one."
    missing = sorted(user.get_all_permissions() - issuer.get_all_permissions())
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        return (
            f"{user.get_username()} holds permissions you do not ({shown}); a token you issue may not carry "
            "more than you hold. Ask a superuser."
        )
    return None


DEFAULT_EXPIRY = object()  # create_api_token's default: API_TOKEN_LIFETIME_DAYS from now


def default_expiry() -> datetime | None:
    days = settings.API_TOKEN_LIFETIME_DAYS
    return timezone.now() + timedelta(days=days) if days else None


@transaction.atomic
def create_api_token(
    *,
    kind: str,
    tenant=None,
    user=None,
    role: str = "",
    name: str = "",
    actor: str,
    issuer=None,
    expires_at=DEFAULT_EXPIRY,
) -> tuple[ApiToken, str]:
    """Returns the token row and its plain value, which is never stored and never shown again.
    With `issuer` (a person minting it in the admin), their rights bound the token's. An
    operator token's scope is its user's rights now; `expires_at` None: it never expires."""
    if issuer is not None:
        refusal = issuance_refusal(issuer=issuer, kind=kind, user=user)
        if refusal:
            raise ValidationError(refusal)
    if kind == ApiTokenKind.TENANT:
        if tenant is None or role not in TenantRole.values:
            raise ValidationError("A tenant token needs a tenant and a role (admin, member or viewer).")
        if user is not None:
            raise ValidationError("A tenant token belongs to its tenant, not to a user; leave the user empty.")
    elif kind == ApiTokenKind.OPERATOR:
        if user is None or not (user.is_staff and user.is_active):
            raise ValidationError(
                "An operator token needs an active staff user; give the user staff status first "
                "or issue a tenant token instead."
            )
        if tenant is not None or role:
            raise ValidationError("An operator token belongs to a staff user; leave the tenant and role empty.")
    else:
        raise ValidationError(f"Unknown token kind {kind!r}.")
    if expires_at is DEFAULT_EXPIRY:
        expires_at = default_expiry()
    if expires_at is not None and expires_at <= timezone.now():
        raise ValidationError("The expiry must be in the future (or empty for a token that does not expire).")
    scope_superuser, scope = False, []
    if kind == ApiTokenKind.OPERATOR:
        scope_superuser = bool(user.is_superuser and (issuer is None or issuer.is_superuser))
        scope = sorted(user.get_all_permissions())
        if issuer is not None and not issuer.is_superuser:
            scope = sorted(set(scope) & issuer.get_all_permissions())  # never above the issuer's
    plain = generate_plain_token(kind)
    token = ApiToken.objects.create(
        kind=kind,
        tenant=tenant,
        user=user,
        role=role,
        name=name,
        prefix=plain[:10],
        digest=token_digest(plain),
        expires_at=expires_at,
        scope_superuser=scope_superuser,
        scope_permissions=scope,
    )
    record_audit(
        actor=actor,
        action="token.create",
        target=token,
        after={
            "kind": kind,
            "tenant": str(tenant.pk) if tenant else None,
            "user": user.get_username() if user else None,
            "role": role,
            "expires_at": expires_at.isoformat() if expires_at else None,
            "scope": "superuser" if scope_superuser else scope,
        },
    )
    return token, plain


@transaction.atomic
def revoke_api_token(*, token: ApiToken, actor: str, reason: str = "") -> ApiToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        record_audit(actor=actor, action="token.revoke", target=token, reason=reason)
    return token


@transaction.atomic
def reissue_api_token(*, token: ApiToken, actor: str, issuer=None) -> tuple[ApiToken, str]:
    """Revoke-and-reissue: tokens are never edited; a new one with the same owner replaces it."""
    revoke_api_token(token=token, actor=actor, reason="reissued")
    return create_api_token(
        kind=token.kind,
        tenant=token.tenant,
        user=token.user,
        role=token.role,
        name=token.name,
        actor=actor,
        issuer=issuer,
    )  # the new token's scope is the user's rights now, bounded by the reissuer's; a fresh expiry
