"""Reading and writing inventory spreadsheets (CSV and XLSX), with no database access.

A workbook is a set of named sheets (racks, nodes, gpus, drives), each a header row and data
rows. A CSV file is one sheet whose kind the uploader names. Reading never raises on bad
input: it returns `FileProblem`s that say what is wrong with the file as a whole.
"""

import csv
import io
import zipfile
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from openpyxl import Workbook as XlsxWorkbook
from openpyxl import load_workbook

SHEETS = ("racks", "nodes", "gpus", "drives")
FORMULA_PREFIXES = ("=", "+", "-", "@", "\t", "\r")


@dataclass
class Sheet:
    name: str
    headers: list[str]
    rows: list[tuple[int, list]] = field(default_factory=list)  # (spreadsheet row number, cells)


@dataclass
class Workbook:
    sheets: dict[str, Sheet]
    problems: list[str]


def read_workbook(filename: str, data: bytes, *, csv_sheet: str, max_rows: int) -> Workbook:
    """Parse an uploaded file. `csv_sheet` names what a CSV file (or a one-sheet workbook whose
    sheet has another name) holds."""
    lower = filename.lower()
    if lower.endswith(".xlsx"):
        return _read_xlsx(data, csv_sheet=csv_sheet, max_rows=max_rows)
    if lower.endswith((".csv", ".txt")):
        return _read_csv(data, sheet=csv_sheet, max_rows=max_rows)
    return Workbook({}, [f"{filename!r} is neither a .csv nor an .xlsx file; save the sheet as CSV (UTF-8) or XLSX."])


def _normalise_headers(raw: Iterable) -> list[str]:
    return [("" if h is None else str(h)).strip().lower().replace(" ", "_") for h in raw]


def _read_csv(data: bytes, *, sheet: str, max_rows: int) -> Workbook:
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return Workbook(
            {},
            [
                (
                    f"The file is not UTF-8 text (byte {exc.start} cannot be read); "
                    "save it as 'CSV UTF-8' and upload it again."
                )
            ],
        )
    if "\x00" in text:
        return Workbook({}, ["The file contains NUL characters; it is not a CSV text file."])
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
        if header is None:
            return Workbook({}, ["The file is empty; the first row must name the columns."])
        result = Sheet(sheet, _normalise_headers(header))
        for number, cells in enumerate(reader, start=2):
            if not any(c.strip() for c in cells):
                continue
            if len(result.rows) >= max_rows:
                return Workbook(
                    {}, [f"The file has more than {max_rows:,} rows; split it (e.g. one file per rack row)."]
                )
            result.rows.append((number, cells))
    except csv.Error as exc:
        return Workbook({}, [f"The file is not valid CSV ({exc}); check its quoting."])
    return Workbook({sheet: result}, [])


def _read_xlsx(data: bytes, *, csv_sheet: str, max_rows: int) -> Workbook:
    try:
        book = load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    except (zipfile.BadZipFile, KeyError, ValueError, OSError, TypeError) as exc:
        return Workbook(
            {},
            [
                (
                    f"The file is not a readable XLSX workbook ({type(exc).__name__}); save it again as "
                    "Excel Workbook (.xlsx)."
                )
            ],
        )
    sheets: dict[str, Sheet] = {}
    problems: list[str] = []
    names = book.sheetnames
    total = 0
    try:
        for title in names:
            name = title.strip().lower()
            if name not in SHEETS:
                if len(names) == 1:
                    name = csv_sheet
                else:
                    problems.append(f"Sheet {title!r} is not one of {', '.join(SHEETS)}; rename or remove it.")
                    continue
            if name in sheets:
                problems.append(f"Two sheets are named {name!r}; merge them.")
                continue
            rows = book[title].iter_rows(values_only=True)
            header = next(rows, None)
            if header is None:
                continue
            sheet = Sheet(name, _normalise_headers(header))
            for number, cells in enumerate(rows, start=2):
                if not any(c not in (None, "") for c in cells):
                    continue
                total += 1
                if total > max_rows:
                    return Workbook({}, [f"The workbook has more than {max_rows:,} rows; split it."])
                sheet.rows.append((number, list(cells)))
            sheets[name] = sheet
    except (zipfile.BadZipFile, KeyError, ValueError, OSError, TypeError) as exc:
        return Workbook({}, [f"The workbook could not be read ({type(exc).__name__}); save it again as .xlsx."])
    finally:
        book.close()
    if not sheets and not problems:
        problems.append("The workbook has no rows; the first row of each sheet must name the columns.")
    return Workbook(sheets, problems)


def safe_cell(value):
    """A text cell that a spreadsheet would run as a formula is written as text ('=...)."""
    if isinstance(value, str) and value.startswith(FORMULA_PREFIXES):
        return "'" + value
    return value


def csv_lines(headers: list[str], rows: Iterable[list]) -> Iterator[str]:
    """CSV text, a line at a time (for a streaming response)."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(headers)
    for row in rows:
        writer.writerow([safe_cell("" if v is None else v) for v in row])
        if buffer.tell() > 64 * 1024:
            yield buffer.getvalue()
            buffer.seek(0)
            buffer.truncate()
    yield buffer.getvalue()


def xlsx_bytes(sheets: list[tuple[str, list[str], Iterable[list]]]) -> bytes:
    book = XlsxWorkbook(write_only=True)
    for name, headers, rows in sheets:
        sheet = book.create_sheet(name)
        sheet.append(headers)
        for row in rows:
            sheet.append([safe_cell(v) for v in row])
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()
