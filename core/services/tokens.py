"""Creating and revoking API tokens (tenant and operator). Agent tokens are minted from the
node id and the signing key; see core.api.agent_tokens."""
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from core.api.authentication import generate_plain_token, token_digest
from core.choices import ApiTokenKind, TenantRole
from core.models import ApiToken

from .audit import record_audit


@transaction.atomic
def create_api_token(*, kind: str, tenant=None, user=None, role: str = "", name: str = "", actor: str) -> tuple[ApiToken, str]:
    """Returns the token row and its plain value, which is never stored and never shown again."""
    if kind == ApiTokenKind.TENANT:
        if tenant is None or role not in TenantRole.values:
            raise ValidationError("A tenant token needs a tenant and a role (admin, member or viewer).")
        user = None
    elif kind == ApiTokenKind.OPERATOR:
        if user is None or not user.is_staff:
            raise ValidationError("An operator token needs a staff user.")
        tenant, role = None, ""
    else:
        raise ValidationError(f"Unknown token kind {kind!r}.")
    plain = generate_plain_token(kind)
    token = ApiToken.objects.create(kind=kind, tenant=tenant, user=user, role=role, name=name,
                                    prefix=plain[:10], digest=token_digest(plain))
    record_audit(actor=actor, action="token.create", target=token,
                 after={"kind": kind, "tenant": str(tenant.pk) if tenant else None,
                        "user": user.get_username() if user else None, "role": role})
    return token, plain


@transaction.atomic
def revoke_api_token(*, token: ApiToken, actor: str, reason: str = "") -> ApiToken:
    if token.revoked_at is None:
        token.revoked_at = timezone.now()
        token.save(update_fields=["revoked_at"])
        record_audit(actor=actor, action="token.revoke", target=token, reason=reason)
    return token
