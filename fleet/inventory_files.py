"""Reading and writing inventory spreadsheets (CSV and XLSX), with no database access.

A workbook is a set of named sheets (racks, nodes, gpus, drives), each a header row and data
rows. A CSV file is one sheet whose kind the uploader names. Reading never raises on bad
input: it returns problems (sentences) that say what is wrong with the file as a whole.
Both formats are read within the same limits (fleet.bounded_xlsx.Limits): rows read (blank
ones included), cells per row and in all, characters per cell.
"""

import csv
import io
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from openpyxl import Workbook as XlsxWorkbook

from .bounded_xlsx import FileRefused, Limits, ReadStats, XlsxReader

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
    stats: ReadStats = field(default_factory=ReadStats)  # what reading it cost (rows, cells, bytes inflated)


def read_workbook(
    filename: str, data: bytes, *, csv_sheet: str, max_rows: int, limits: Limits | None = None
) -> Workbook:
    """Parse an uploaded file within `limits` (fleet.bounded_xlsx; by default `max_rows` rows,
    blank ones included). `csv_sheet` names what a CSV file (or a one-sheet workbook whose
    sheet has another name) holds."""
    limits = limits or Limits(max_rows=max_rows)
    lower = filename.lower()
    if lower.endswith(".xlsx"):
        return _read_xlsx(data, csv_sheet=csv_sheet, limits=limits)
    if lower.endswith((".csv", ".txt")):
        return _read_csv(data, sheet=csv_sheet, limits=limits)
    return Workbook({}, [f"{filename!r} is neither a .csv nor an .xlsx file; save the sheet as CSV (UTF-8) or XLSX."])


def _normalise_headers(raw: Iterable) -> list[str]:
    return [("" if h is None else str(h)).strip().lower().replace(" ", "_") for h in raw]


def _bounded_lines(text: str, limit: int) -> Iterator[str]:
    """The file's lines for the csv module, refusing one longer than `limit` characters before the
    csv module splits it (a line of millions of commas would otherwise become a list of millions)."""
    for line in io.StringIO(text, newline=""):
        if len(line) > limit:
            raise FileRefused(
                f"A line of the file is longer than {limit:,} characters; an inventory row is a few hundred. "
                "Check that the file is the CSV export of the sheet."
            )
        yield line


def _read_csv(data: bytes, *, sheet: str, limits: Limits) -> Workbook:
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
    stats = ReadStats()
    # a record is at most max_columns cells of max_cell_chars: the same bounds as a workbook's row
    reader = csv.reader(_bounded_lines(text, limits.max_columns * 1024 + limits.max_cell_chars))
    try:
        header = next(reader, None)
        if header is None:
            return Workbook({}, ["The file is empty; the first row must name the columns."])
        result = Sheet(sheet, _normalise_headers(_bounded_cells(header, 1, limits, stats)))
        for number, cells in enumerate(reader, start=2):
            stats.rows += 1
            if stats.rows > limits.max_rows:
                raise FileRefused(
                    f"The file has more than {limits.max_rows:,} rows (blank rows count too); split it "
                    "(e.g. one file per rack row)."
                )
            cells = _bounded_cells(cells, number, limits, stats)
            if not any(c.strip() for c in cells):
                continue
            result.rows.append((number, cells))
    except FileRefused as exc:
        return Workbook({}, [str(exc)], stats)
    except csv.Error as exc:
        return Workbook({}, [f"The file is not valid CSV ({str(exc)[:100]}); check its quoting."], stats)
    return Workbook({sheet: result}, [], stats)


def _bounded_cells(cells: list[str], number: int, limits: Limits, stats: ReadStats) -> list[str]:
    stats.cells += len(cells)
    if len(cells) > limits.max_columns:
        raise FileRefused(
            f"Row {number} has {len(cells):,} cells; inventory sheets have at most 11 columns "
            f"(at most {limits.max_columns} are read). Delete the cells right of the table."
        )
    if stats.cells > limits.max_cells:
        raise FileRefused(f"The file has more than {limits.max_cells:,} cells (empty ones count too); split it.")
    for position, cell in enumerate(cells, start=1):
        if len(cell) > limits.max_cell_chars:
            raise FileRefused(
                f"Row {number}, column {position} holds more than {limits.max_cell_chars:,} characters, more "
                "than a spreadsheet cell can hold; this is not an inventory sheet."
            )
    return cells


def _read_xlsx(data: bytes, *, csv_sheet: str, limits: Limits) -> Workbook:
    stats = ReadStats()
    try:
        book = XlsxReader(data, limits, stats)
    except FileRefused as exc:
        return Workbook({}, [str(exc)], stats)
    sheets: dict[str, Sheet] = {}
    problems: list[str] = []
    titles = [title for title, _part in book.sheets]
    try:
        for title in titles:
            name = title.strip().lower()
            if name not in SHEETS:
                if len(titles) == 1:
                    name = csv_sheet
                else:
                    problems.append(f"Sheet {title!r} is not one of {', '.join(SHEETS)}; rename or remove it.")
                    continue
            if name in sheets:
                problems.append(f"Two sheets are named {name!r}; merge them.")
                continue
            sheet = None
            for number, cells in book.rows(title):
                if not any(c not in (None, "") for c in cells):
                    continue
                if sheet is None:  # the first row with anything in it names the columns
                    sheet = Sheet(name, _normalise_headers(cells))
                    continue
                sheet.rows.append((number, cells))
            if sheet is not None:
                sheets[name] = sheet
    except FileRefused as exc:
        return Workbook({}, [str(exc)], book.stats)
    finally:
        book.close()
    if not sheets and not problems:
        problems.append("The workbook has no rows; the first row of each sheet must name the columns.")
    return Workbook(sheets, problems, book.stats)


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
