"""Invoices as CSV for the tenant API and the portal: one row per line, then a total row,
with every cell that a spreadsheet could read as a formula written as text.

Every amount in the CSV is before tax, and it says so: the `tax_included` column is `no` on
every row, and the total row's description is "Total excluding tax". Tax, credit notes and the
balance due are on the invoice page, its PDF and the API (`total_including_tax`, `balance_due`).
"""

import csv
import io

from billing.periods import format_period
from core.exports import safe_row

CSV_HEADER = (
    "invoice",
    "status",
    "period",
    "line",
    "kind",
    "sku",
    "description",
    "usage_period",
    "start",
    "end",
    "gpu_seconds",
    "quantity",
    "unit",
    "unit_price",
    "price_version",
    "rate",
    "amount",
    "currency",
    "note",
    "reference",
    "tax_included",  # "no": every amount here is before tax
)
TOTAL_DESCRIPTION = "Total excluding tax (the net of the lines; tax is on the invoice page, PDF and API)"


def _when(moment) -> str:
    return "" if moment is None else moment.isoformat().replace("+00:00", "Z")


def invoice_csv(invoice) -> str:
    """The invoice as CSV: one row per line, then a total row. `amount` = ±round_half_even(
    gpu_seconds × unit_price × rate ÷ 3600) unless `note` says the line was capped."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(CSV_HEADER)
    label = invoice.number or f"draft-{invoice.pk}"
    for line in invoice.lines.all():
        writer.writerow(
            safe_row(
                (
                    label,
                    invoice.status,
                    format_period(invoice.period),
                    line.position,
                    line.kind,
                    line.sku,
                    line.description,
                    format_period(line.usage_period),
                    _when(line.start),
                    _when(line.end),
                    line.gpu_seconds,
                    line.quantity,
                    line.unit,
                    "" if line.unit_price is None else line.unit_price,
                    line.price_version or "",
                    line.rate,
                    line.amount,
                    invoice.currency,
                    line.note,
                    line.reference,
                    "no",
                )
            )
        )
    total = dict.fromkeys(CSV_HEADER, "") | {
        "invoice": label,
        "status": invoice.status,
        "kind": "total",
        "description": TOTAL_DESCRIPTION,
        "tax_included": "no",
        "period": format_period(invoice.period),
        "amount": invoice.total,
        "currency": invoice.currency,
    }
    writer.writerow(safe_row(total.values()))
    return buffer.getvalue()
