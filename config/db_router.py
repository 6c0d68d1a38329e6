"""Sends the billing app to the `ledger` database and everything else to `default`.

The ledger lives in its own database so metering keeps working while the control-plane
database is down (DESIGN.md, "Billing").
"""

LEDGER_APPS = frozenset({"billing"})
LEDGER_ALIAS = "ledger"


class LedgerRouter:
    def db_for_read(self, model, **hints):
        return LEDGER_ALIAS if model._meta.app_label in LEDGER_APPS else "default"

    def db_for_write(self, model, **hints):
        return self.db_for_read(model, **hints)

    def allow_relation(self, obj1, obj2, **hints):
        in_ledger = {obj1._meta.app_label in LEDGER_APPS, obj2._meta.app_label in LEDGER_APPS}
        return len(in_ledger) == 1

    def allow_migrate(self, db, app_label, model_name=None, **hints):
        if app_label in LEDGER_APPS:
            return db == LEDGER_ALIAS
        return db == "default"
