"""Sends the billing app to the `ledger` database and everything else to `default`.

The ledger lives in its own database so metering keeps working while the control-plane
database is down (docs/design, "Billing").
"""

LEDGER_APPS = frozenset({"billing"})
# Models kept in both databases, each side reading its own copy with .using(): the agent-token
# revocation list, so meter ingest needs no control-plane database and the control-plane agent
# routes no ledger (core.services.agent_credentials writes both).
BOTH_DATABASES_MODELS = frozenset({("core", "agenttokenrevocation")})
LEDGER_ALIAS = "ledger"


def _in_ledger(app_label: str, model_name: str | None) -> bool:
    return app_label in LEDGER_APPS


class LedgerRouter:
    def db_for_read(self, model, **hints):
        return LEDGER_ALIAS if _in_ledger(model._meta.app_label, model._meta.model_name) else "default"

    def db_for_write(self, model, **hints):
        return self.db_for_read(model, **hints)

    def allow_relation(self, obj1, obj2, **hints):
        in_ledger = {_in_ledger(o._meta.app_label, o._meta.model_name) for o in (obj1, obj2)}
        return len(in_ledger) == 1

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        if (app_label, model_name) in BOTH_DATABASES_MODELS:
            return True
        if _in_ledger(app_label, model_name):
            return db == LEDGER_ALIAS
        return db == "default"
