"""An operator's hourly grid carbon intensity profile for a site, uploaded as CSV.

The file is `hour,kg_co2e_per_kwh`, one row per UTC hour (RFC 3339, on the hour, any offset;
e.g. `2026-11-02T10:00:00Z,0.412`). It is bounded (1 MiB, 17,568 rows = two leap years of hours,
intensities 0–3 kg CO2e/kWh: the dirtiest grids run near 1.2) and validated as a whole: any bad
row refuses the file with the line numbers (at most 20 listed), and nothing is written. A good
file replaces the site's figures for the hours it covers and leaves other hours alone; hours no
profile covers use the site's constant (tenants.energy).
"""

import csv
import hashlib
import io
from datetime import UTC, datetime
from decimal import Decimal, InvalidOperation

from django.db import transaction

from core.errors import Invalid
from core.services.audit import record_audit
from fleet.models import GridIntensityHour, Site

MAX_BYTES = 1024 * 1024
MAX_ROWS = 17_568
MAX_KG_PER_KWH = Decimal("3")
MAX_ERRORS_LISTED = 20
HEADER = ["hour", "kg_co2e_per_kwh"]


def _parse_hour(text: str) -> datetime:
    moment = datetime.fromisoformat(text.strip().replace("Z", "+00:00"))
    if moment.tzinfo is None:
        raise ValueError("give the UTC offset (e.g. 2026-11-02T10:00:00Z)")
    moment = moment.astimezone(UTC)
    if moment.minute or moment.second or moment.microsecond:
        raise ValueError("must be the start of an hour (minutes and seconds 00)")
    return moment


def _parse_intensity(text: str) -> Decimal:
    try:
        value = Decimal(text.strip())
    except InvalidOperation:
        raise ValueError("must be a number of kg CO2e per kWh, e.g. 0.412") from None
    if not value.is_finite() or not Decimal(0) <= value <= MAX_KG_PER_KWH:
        raise ValueError(f"must be between 0 and {MAX_KG_PER_KWH} kg CO2e per kWh")
    if value != value.quantize(Decimal("0.0001")):
        raise ValueError("at most 4 decimal places")
    return value


def parse_grid_profile(raw: bytes) -> list[tuple[datetime, Decimal]]:
    """[(hour, kg CO2e per kWh)] sorted by hour, or Invalid listing what is wrong and where."""
    if len(raw) > MAX_BYTES:
        raise Invalid(f"The file is larger than {MAX_BYTES // 1024} KiB; split it by year and upload each part.")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise Invalid("The file is not UTF-8 text; export it as CSV (UTF-8).") from None
    if "\x00" in text:
        raise Invalid("The file contains NUL characters; it is not a CSV text file.")
    rows = list(csv.reader(io.StringIO(text)))
    if not rows or [c.strip().lower() for c in rows[0]] != HEADER:
        raise Invalid(
            "The first line must be the header 'hour,kg_co2e_per_kwh'.",
            extra={"errors": [{"field": "line 1", "message": "expected the header hour,kg_co2e_per_kwh"}]},
        )
    body = [(i, r) for i, r in enumerate(rows[1:], start=2) if any(c.strip() for c in r)]
    if not body:
        raise Invalid("The file has a header and no hours; add one row per hour.")
    if len(body) > MAX_ROWS:
        raise Invalid(
            f"The file has {len(body):,} hours; at most {MAX_ROWS:,} per upload. Split it and upload each part."
        )
    errors: list[dict] = []
    seen: dict[datetime, int] = {}
    out = []
    for line, row in body:
        if len(row) != 2:
            errors.append({"field": f"line {line}", "message": "expected two columns: hour,kg_co2e_per_kwh"})
            continue
        try:
            hour = _parse_hour(row[0])
            value = _parse_intensity(row[1])
        except ValueError as exc:
            errors.append({"field": f"line {line}", "message": str(exc)})
            continue
        if hour in seen:
            errors.append(
                {"field": f"line {line}", "message": f"hour {hour:%Y-%m-%dT%H:%MZ} is also on line {seen[hour]}"}
            )
            continue
        seen[hour] = line
        out.append((hour, value))
    if errors:
        listed = errors[:MAX_ERRORS_LISTED]
        raise Invalid(
            f"{len(errors)} row(s) are invalid, nothing was saved; fix them and upload the file again.",
            extra={"errors": listed, "errors_total": len(errors)},
        )
    return sorted(out)


@transaction.atomic
def upload_grid_profile(*, site: Site, raw: bytes, actor: str) -> dict:
    """Replace the site's hourly intensities for the hours in the file. Audited."""
    rows = parse_grid_profile(raw)
    hours = [hour for hour, _ in rows]
    replaced = GridIntensityHour.objects.filter(site=site, hour__in=hours).count()
    GridIntensityHour.objects.bulk_create(
        [GridIntensityHour(site=site, hour=hour, kg_co2e_per_kwh=value) for hour, value in rows],
        batch_size=2000,
        update_conflicts=True,
        unique_fields=["site", "hour"],
        update_fields=["kg_co2e_per_kwh"],
    )
    summary = {
        "site_id": str(site.pk),
        "hours": len(rows),
        "replaced": replaced,
        "first_hour": hours[0].isoformat().replace("+00:00", "Z"),
        "last_hour": hours[-1].isoformat().replace("+00:00", "Z"),
        "mean_kg_co2e_per_kwh": str((sum(v for _, v in rows) / len(rows)).quantize(Decimal("0.0001"))),
        "sha256": hashlib.sha256(raw).hexdigest(),
    }
    record_audit(actor=actor, action="site.upload_grid_profile", target=site, after=summary)
    return summary
