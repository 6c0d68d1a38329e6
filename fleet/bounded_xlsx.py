"""Reading an XLSX workbook within bounds, so that no upload can take a worker down.

An XLSX file is a ZIP archive of XML parts. A small archive can inflate to gigabytes, declare
entities that expand exponentially ("billion laughs") or point at outside files, hold one
shared string of hundreds of megabytes, claim a dimension of sixteen thousand columns by a
million rows, or hold a million empty rows. General-purpose readers believe all of that; this
one reads only what an inventory sheet needs, streaming, and stops at the first limit:

- every part is inflated in chunks and counted: at most `max_part_bytes` per part and
  `max_inflated_bytes` for the whole workbook, whatever the archive's directory claims;
- the XML goes through defusedxml's expat reader with DTDs forbidden, so no entity is ever
  declared, expanded or fetched;
- a cell's text is at most `max_cell_chars` (Excel's own limit per cell), counted as it streams
  in, so a huge string is refused after its first 32,767 characters rather than after it has
  been read whole;
- the `<dimension>` element is ignored and nothing is padded: a cell beyond column
  `max_columns` is refused, and every `<row>` and `<c>` element read counts (blank ones
  included) against `max_rows` and `max_cells`; every XML element counts against
  `max_elements`.

Values come back as Python values: text, int or float, bool, and datetime for a number whose
cell style is a date format (as a spreadsheet shows it). No database access.
"""

import io
import re
import struct
import zipfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from xml.sax import SAXException
from xml.sax.handler import ContentHandler, feature_namespaces

from defusedxml import DefusedXmlException
from defusedxml.expatreader import DefusedExpatParser
from openpyxl.styles.numbers import BUILTIN_FORMATS, is_date_format
from openpyxl.utils.datetime import MAC_EPOCH, WINDOWS_EPOCH, from_excel

CHUNK = 64 * 1024
EXCEL_MAX_ROW = 1_048_576  # the last row of a sheet (Excel specifications and limits)
EXCEL_CELL_CHARS = 32_767  # the most characters a cell can hold (Excel specifications and limits)
_CELL_REF = re.compile(r"^([A-Z]{1,3})([0-9]{1,7})$")
# What zipfile and zlib raise on a damaged, unsupported or encrypted archive (found by fuzzing
# valid workbooks with a byte changed: a header claiming zip version 6.4 is NotImplementedError)
ARCHIVE_ERRORS = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    zlib.error,
    struct.error,
    EOFError,
    OSError,
    RuntimeError,
    NotImplementedError,
    ValueError,
    UnicodeError,
    OverflowError,
)


@dataclass(frozen=True)
class Limits:
    max_rows: int = 60_000  # rows read besides one header row per sheet, blank rows included, all sheets together
    max_columns: int = 64  # the widest inventory sheet has 11 columns
    max_cells: int = 1_000_000  # <c> elements read, empty ones included
    max_cell_chars: int = EXCEL_CELL_CHARS
    max_part_bytes: int = 48 * 1024 * 1024  # one XML part, inflated
    max_inflated_bytes: int = 96 * 1024 * 1024  # every part read, inflated
    max_elements: int = 3_000_000  # XML elements of every part read
    max_sheets: int = 16
    max_members: int = 1_000  # files in the archive


class FileRefused(Exception):
    """The workbook cannot be read within the limits, or is not a workbook; `str()` says which,
    as a sentence for the person who uploaded it."""


@dataclass
class ReadStats:
    inflated_bytes: int = 0
    elements: int = 0
    rows: int = 0
    cells: int = 0


def column_letters(index: int) -> str:
    letters = ""
    while index:
        index, rest = divmod(index - 1, 26)
        letters = chr(65 + rest) + letters
    return letters


def _column_index(letters: str) -> int:
    index = 0
    for char in letters:
        index = index * 26 + ord(char) - 64
    return index


class _Handler(ContentHandler):
    """Counts every element against the reader's budget; subclasses keep what they need."""

    def __init__(self, reader: "XlsxReader", part: str):
        super().__init__()
        self.reader = reader
        self.part = part

    def startElementNS(self, name, qname, attrs):
        stats, limits = self.reader.stats, self.reader.limits
        stats.elements += 1
        if stats.elements > limits.max_elements:
            raise FileRefused(
                f"The workbook has more than {limits.max_elements:,} XML elements; an inventory workbook of "
                f"{limits.max_rows:,} rows needs far fewer. Save the sheets again as a plain .xlsx, or split the file."
            )
        self.start(name[1], attrs)

    def endElementNS(self, name, qname):
        self.end(name[1])

    def start(self, tag: str, attrs) -> None:
        pass

    def end(self, tag: str) -> None:
        pass


class _TextCollector:
    """Text of a shared string or inline string: counted as it streams, refused past the cell limit."""

    def __init__(self, reader: "XlsxReader", where: str):
        self.reader, self.where = reader, where
        self.parts: list[str] = []
        self.length = 0

    def add(self, text: str) -> None:
        self.length += len(text)
        limit = self.reader.limits.max_cell_chars
        if self.length > limit:
            raise FileRefused(
                f"{self.where} holds a text of more than {limit:,} characters, more than a spreadsheet cell can "
                "hold; this is not an inventory sheet."
            )
        self.parts.append(text)

    def value(self) -> str:
        return "".join(self.parts)


class _SimpleHandler(_Handler):
    """Keeps the attributes of the elements named in `wanted` (workbook, relationships, styles)."""

    def __init__(self, reader, part, wanted: set[str]):
        super().__init__(reader, part)
        self.wanted = wanted
        self.found: list[tuple[str, dict]] = []
        self.path: list[str] = []

    def start(self, tag, attrs):
        self.path.append(tag)
        if tag in self.wanted:
            values = {}
            for (uri, local), value in attrs.items():
                # r:id; the strict OOXML namespace ends the same way as the transitional one
                values[f"r:{local}" if uri and uri.endswith("relationships") else local] = value
            self.found.append(("/".join(self.path[-2:]), values))

    def end(self, tag):
        self.path.pop()


class _SharedStringsHandler(_Handler):
    def __init__(self, reader, part):
        super().__init__(reader, part)
        self.strings: list[str] = []
        self.current: _TextCollector | None = None
        self.in_text = False
        self.in_phonetic = 0

    def start(self, tag, attrs):
        if tag == "si":
            if len(self.strings) >= self.reader.limits.max_cells:
                raise FileRefused(
                    f"The workbook holds more than {self.reader.limits.max_cells:,} shared strings; split the file."
                )
            self.current = _TextCollector(self.reader, f"Shared string {len(self.strings) + 1}")
        elif tag == "rPh":  # phonetic guide text is not part of the cell's value
            self.in_phonetic += 1
        elif tag == "t" and self.current is not None and not self.in_phonetic:
            self.in_text = True

    def characters(self, content):
        if self.in_text:
            self.current.add(content)

    def end(self, tag):
        if tag == "t":
            self.in_text = False
        elif tag == "rPh":
            self.in_phonetic -= 1
        elif tag == "si" and self.current is not None:
            self.strings.append(self.current.value())
            self.current = None


class _SheetHandler(_Handler):
    """Rows of one worksheet as (row number, [values]); cells placed by their reference, never padded
    beyond the last cell the row really has."""

    def __init__(self, reader, part, title: str):
        super().__init__(reader, part)
        self.title = title
        self.ready: list[tuple[int, list]] = []
        self.row_number = 0
        self.row: dict[int, object] | None = None
        self.cells_in_row = 0
        self.column = 0
        self.cell_type = ""
        self.cell_style = 0
        self.text: _TextCollector | None = None
        self.collect = ""  # "v" or "is": which text the cell's value is
        self.in_t = False

    def _refuse_beyond(self, ref: str) -> None:
        limit = self.reader.limits.max_columns
        raise FileRefused(
            f"Sheet {self.title!r} has a cell at {ref}, beyond column {column_letters(limit)} ({limit}); "
            "inventory sheets have at most 11 columns. Delete the cells right of the table and save again."
        )

    def start(self, tag, attrs):
        reader, limits = self.reader, self.reader.limits
        if tag == "row":
            reader.stats.rows += 1
            if reader.stats.rows > limits.max_rows + reader.sheets_read:  # one header row per sheet
                raise FileRefused(
                    f"The workbook has more than {limits.max_rows:,} rows (blank rows count too); split it, "
                    "e.g. one file per hall or rack row."
                )
            given = attrs.get((None, "r"))
            if given is not None:
                if not given.isdigit() or not 1 <= int(given) <= EXCEL_MAX_ROW:
                    raise FileRefused(
                        f"Sheet {self.title!r} has a row numbered {given[:20]!r}; save it again as .xlsx."
                    )
                self.row_number = int(given)
            else:
                self.row_number += 1
            self.row, self.cells_in_row, self.column = {}, 0, 0
        elif tag == "c" and self.row is not None:
            reader.stats.cells += 1
            self.cells_in_row += 1
            if reader.stats.cells > limits.max_cells:
                raise FileRefused(
                    f"The workbook has more than {limits.max_cells:,} cells (empty ones count too); split it."
                )
            if self.cells_in_row > limits.max_columns:
                self._refuse_beyond(f"row {self.row_number}")
            ref = attrs.get((None, "r"))
            if ref is not None:
                match = _CELL_REF.match(ref)
                if match is None:
                    raise FileRefused(f"Sheet {self.title!r} has a cell named {ref[:20]!r}; save it again as .xlsx.")
                self.column = _column_index(match.group(1))
                if self.column > limits.max_columns:
                    self._refuse_beyond(ref)
            else:
                self.column += 1
                if self.column > limits.max_columns:
                    self._refuse_beyond(f"{column_letters(self.column)}{self.row_number}")
            self.cell_type = attrs.get((None, "t"), "n")
            style = attrs.get((None, "s"), "0")
            self.cell_style = int(style) if style.isdigit() and len(style) < 7 else 0
            self.text, self.collect = None, ""
        elif self.row is not None and tag in ("v", "is"):
            self.collect = tag
            self.text = _TextCollector(reader, f"Sheet {self.title!r}, row {self.row_number},")
        elif tag == "t" and self.collect == "is":
            self.in_t = True
        elif tag == "rPh":
            self.in_t = False

    def characters(self, content):
        if self.text is not None and (self.collect == "v" or self.in_t):
            self.text.add(content)

    def end(self, tag):
        if tag == "t":
            self.in_t = False
        elif tag == "c" and self.row is not None:
            if self.text is not None:
                self.row[self.column] = self.reader.cell_value(self.cell_type, self.text.value(), self.cell_style)
            self.text, self.collect = None, ""
        elif tag == "row" and self.row is not None:
            width = max(self.row, default=0)
            cells = [self.row.get(i) for i in range(1, width + 1)]
            self.ready.append((self.row_number, cells))
            self.row = None


class XlsxReader:
    """One uploaded workbook, read lazily and within `limits`. Raises FileRefused."""

    def __init__(self, data: bytes, limits: Limits, stats: ReadStats | None = None):
        self.limits = limits
        self.stats = stats if stats is not None else ReadStats()
        self.sheets_read = 0
        try:
            self.zip = zipfile.ZipFile(io.BytesIO(data))
        except ARCHIVE_ERRORS as exc:
            raise FileRefused(
                "The file is not an XLSX workbook (it is not a readable ZIP archive); save it again as "
                "Excel Workbook (.xlsx)."
            ) from exc
        if len(self.zip.infolist()) > limits.max_members:
            raise FileRefused(
                f"The archive holds more than {limits.max_members:,} files; an XLSX workbook holds a few dozen."
            )
        self.names = {info.filename for info in self.zip.infolist()}
        workbook_part = self._office_document()
        base = workbook_part.rpartition("/")[0]
        rels = self._parse(_rels_of(workbook_part), {"Relationship"}, optional=True)
        targets = {r.get("Id"): _resolve(base, r.get("Target", "")) for _, r in rels}
        kinds = {r.get("Id"): r.get("Type", "").rsplit("/", 1)[-1] for _, r in rels}
        book = self._parse(workbook_part, {"sheet", "workbookPr"})
        self.epoch = WINDOWS_EPOCH
        self.sheets: list[tuple[str, str | None]] = []  # (title, part or None when it is no worksheet)
        for where, attrs in book:
            if where.endswith("workbookPr"):
                if attrs.get("date1904", "").lower() in ("1", "true"):
                    self.epoch = MAC_EPOCH
                continue
            rel = attrs.get("r:id")
            part = targets.get(rel) if kinds.get(rel) == "worksheet" else None
            self.sheets.append((attrs.get("name", "")[:100], part))
            if len(self.sheets) > limits.max_sheets:
                raise FileRefused(
                    f"The workbook has more than {limits.max_sheets} sheets; keep only the inventory sheets."
                )
        styles = next((t for i, t in targets.items() if kinds.get(i) == "styles"), None)
        strings = next((t for i, t in targets.items() if kinds.get(i) == "sharedStrings"), None)
        self.date_styles = self._date_styles(styles)
        self.shared_strings: list[str] = []
        if strings is not None and strings in self.names:
            handler = _SharedStringsHandler(self, strings)
            self._run(strings, handler)
            self.shared_strings = handler.strings

    # -- parts ------------------------------------------------------------------------------
    def _office_document(self) -> str:
        for _, rel in self._parse("_rels/.rels", {"Relationship"}, optional=True):
            if rel.get("Type", "").endswith("/officeDocument"):
                return _resolve("", rel.get("Target", ""))
        return "xl/workbook.xml"

    def _feed(self, part: str, handler: _Handler) -> None:
        """Stream one part through the defused parser, inflating at most the part's budget."""
        parser = DefusedExpatParser(forbid_dtd=True, forbid_entities=True, forbid_external=True)
        parser.setFeature(feature_namespaces, True)
        parser.setContentHandler(handler)
        limits, read = self.limits, 0
        try:
            with self.zip.open(part) as stream:
                while chunk := stream.read(CHUNK):
                    read += len(chunk)
                    self.stats.inflated_bytes += len(chunk)
                    if read > limits.max_part_bytes or self.stats.inflated_bytes > limits.max_inflated_bytes:
                        raise FileRefused(
                            f"The workbook inflates to more than {limits.max_part_bytes // 2**20} MiB in one part "
                            f"({part}) or {limits.max_inflated_bytes // 2**20} MiB in all; an inventory workbook "
                            "is far smaller. Split it or save it again as a plain .xlsx."
                        )
                    parser.feed(chunk)
                    yield
            parser.close()
        except FileRefused:
            raise
        except DefusedXmlException as exc:
            raise FileRefused(
                f"Part {part} declares XML entities or a DTD ({type(exc).__name__}); a spreadsheet never needs "
                "them, and they are not read. Save the sheets again from a spreadsheet program."
            ) from None
        except (SAXException, LookupError) as exc:  # LookupError: an XML declaration naming no known encoding
            raise FileRefused(f"Part {part} of the workbook is not well-formed XML ({exc}); save it again.") from None
        except ARCHIVE_ERRORS as exc:
            raise FileRefused(
                f"Part {part} of the archive cannot be unpacked ({type(exc).__name__}: {str(exc)[:80]}); "
                "save the workbook again as .xlsx (not encrypted or password-protected)."
            ) from None

    def _run(self, part: str, handler: _Handler) -> None:
        for _ in self._feed(part, handler):
            pass

    def _parse(self, part: str, wanted: set[str], *, optional: bool = False) -> list[tuple[str, dict]]:
        if part not in self.names:
            if optional:
                return []
            raise FileRefused(f"The workbook has no {part}; save it again as Excel Workbook (.xlsx).")
        handler = _SimpleHandler(self, part, wanted)
        self._run(part, handler)
        return handler.found

    def _date_styles(self, part: str | None) -> set[int]:
        """Indexes of the cell styles (cellXfs) whose number format shows a date."""
        if part is None or part not in self.names:
            return set()
        found = self._parse(part, {"numFmt", "xf"})
        custom = {}
        for where, attrs in found:
            if where.endswith("numFmt") and attrs.get("numFmtId", "").isdigit():
                custom[int(attrs["numFmtId"])] = attrs.get("formatCode", "")[:255]
        dates, index = set(), 0
        for where, attrs in found:
            if where != "cellXfs/xf":
                continue
            number_format = attrs.get("numFmtId", "0")
            code_id = int(number_format) if number_format.isdigit() and len(number_format) < 7 else 0
            code = custom.get(code_id, BUILTIN_FORMATS.get(code_id, ""))
            if code and is_date_format(code):
                dates.add(index)
            index += 1
        return dates

    # -- values -----------------------------------------------------------------------------
    def cell_value(self, kind: str, text: str, style: int):
        if kind == "s":
            if not text.strip().isdigit() or int(text) >= len(self.shared_strings):
                raise FileRefused("A cell refers to a shared string the workbook does not have; save it again.")
            return self.shared_strings[int(text)]
        if kind in ("inlineStr", "str", "e"):
            return text
        if kind == "b":
            return text.strip() in ("1", "true")
        if kind == "d":
            return text.strip()
        try:
            number = float(text)
        except ValueError:
            return text
        if style in self.date_styles and 0 <= number < 2_958_466:  # up to 9999-12-31
            return from_excel(number, self.epoch)
        if number.is_integer() and abs(number) < 2**53:
            return int(number)
        return number

    # -- sheets -----------------------------------------------------------------------------
    def rows(self, title: str) -> Iterator[tuple[int, list]]:
        """Every row element of the sheet named `title`, blank ones included, in file order."""
        part = dict(self.sheets).get(title)
        if part is None:
            raise FileRefused(f"Sheet {title!r} is not a worksheet (a chart or macro sheet?); remove it.")
        if part not in self.names:
            raise FileRefused(f"Sheet {title!r} has no data part in the archive; save the workbook again.")
        handler = _SheetHandler(self, part, title)
        self.sheets_read += 1
        for _ in self._feed(part, handler):
            yield from handler.ready
            handler.ready.clear()
        yield from handler.ready

    def close(self) -> None:
        self.zip.close()


def _rels_of(part: str) -> str:
    folder, _, name = part.rpartition("/")
    return f"{folder}/_rels/{name}.rels" if folder else f"_rels/{name}.rels"


def _resolve(base: str, target: str) -> str:
    """A relationship target as an archive member name ("worksheets/sheet1.xml" under "xl")."""
    if target.startswith("/"):
        return target.lstrip("/")
    parts = [p for p in base.split("/") if p] if base else []
    for piece in target.split("/"):
        if piece == "..":
            if parts:
                parts.pop()
        elif piece and piece != ".":
            parts.append(piece)
    return "/".join(parts)
