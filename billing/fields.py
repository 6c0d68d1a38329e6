"""Money and quantities stored exactly on every database.

Django's DecimalField becomes a column of NUMERIC affinity on SQLite, which keeps a REAL
(binary float) whenever the text looks like a number, and reads it back through a float.
`ExactDecimalField` keeps NUMERIC(p, s) on PostgreSQL and TEXT on SQLite; values are written
as fixed-point text with exactly `decimal_places` digits, and a value that would need rounding
to fit is refused rather than silently rounded. Never SUM these columns in SQL: SQLite would
sum them as floats. Sum the Decimals in Python (money paths do).
"""

from decimal import Decimal

from django.db import models


class ExactDecimalField(models.DecimalField):
    def get_internal_type(self) -> str:
        # Not "DecimalField": SQLite's converter for that type parses every value as a float.
        return "ExactDecimalField"

    def db_type(self, connection) -> str:
        if connection.vendor == "sqlite":
            return "text"
        return connection.data_types["DecimalField"] % {
            "max_digits": self.max_digits,
            "decimal_places": self.decimal_places,
        }

    def cast_db_type(self, connection) -> str:
        return self.db_type(connection)

    def _exact(self, value: Decimal) -> Decimal:
        quantum = Decimal(1).scaleb(-self.decimal_places)
        fitted = value.quantize(quantum)
        if fitted != value:
            raise ValueError(
                f"{self.model.__name__}.{self.name}: {value} has more than {self.decimal_places} "
                "decimal places; round it explicitly before storing"
            )
        return fitted

    def get_db_prep_value(self, value, connection, prepared=False):
        if not prepared:
            value = self.get_prep_value(value)
        if value is None or hasattr(value, "as_sql"):
            return value
        value = self._exact(Decimal(value))
        if connection.vendor == "sqlite":
            return format(value, "f")
        return value

    def from_db_value(self, value, expression, connection):
        if value is None:
            return None
        return Decimal(value) if isinstance(value, (str, Decimal)) else Decimal(str(value))
