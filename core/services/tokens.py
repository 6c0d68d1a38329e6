"""Creating and revoking API tokens (tenant and operator). Agent tokens are minted from the
node id and the signing key; see core.api.agent_tokens."""

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


@transaction.atomic
def create_api_token(
    *, kind: str, tenant=None, user=None, role: str = "", name: str = "", actor: str, issuer=None
) -> tuple[ApiToken, str]:
    """Returns the token row and its plain value, which is never stored and never shown again.
    With `issuer` (a person minting it in the admin), their rights bound the token's."""
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
    plain = generate_plain_token(kind)
    token = ApiToken.objects.create(
        kind=kind, tenant=tenant, user=user, role=role, name=name, prefix=plain[:10], digest=token_digest(plain)
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
    )
