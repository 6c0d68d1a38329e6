"""Hand-built XLSX archives for the bounded reader's tests: a minimal valid workbook and the files
that take an unbounded reader down (issue 42). Written part by part with zipfile, streamed, so
building a 200 MB shared string costs this process a megabyte, not 200."""

import io
import zipfile

MAIN_NS = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
REL_NS = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
PKG_REL_NS = "http://schemas.openxmlformats.org/package/2006/relationships"
TYPE = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/"

NODE_HEADER = ["hostname", "serial", "rack", "u_position", "node_type"]

CONTENT_TYPES = (
    '<?xml version="1.0" encoding="UTF-8"?><Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/></Types>'
)
ROOT_RELS = (
    f'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{PKG_REL_NS}">'
    f'<Relationship Id="rId1" Type="{TYPE}officeDocument" Target="xl/workbook.xml"/></Relationships>'
)


def _workbook(titles: list[str]) -> str:
    sheets = "".join(f'<sheet name="{t}" sheetId="{i}" r:id="rId{i}"/>' for i, t in enumerate(titles, start=1))
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="{MAIN_NS}" xmlns:r="{REL_NS}">'
        f"<sheets>{sheets}</sheets></workbook>"
    )


def _workbook_rels(count: int) -> str:
    rels = "".join(
        f'<Relationship Id="rId{i}" Type="{TYPE}worksheet" Target="worksheets/sheet{i}.xml"/>'
        for i in range(1, count + 1)
    )
    rels += f'<Relationship Id="rId{count + 1}" Type="{TYPE}sharedStrings" Target="sharedStrings.xml"/>'
    rels += f'<Relationship Id="rId{count + 2}" Type="{TYPE}styles" Target="styles.xml"/>'
    return f'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{PKG_REL_NS}">{rels}</Relationships>'


# numFmtId 14 is the built-in short date: a number in a cell of style 1 is a date
STYLES = (
    f'<?xml version="1.0" encoding="UTF-8"?><styleSheet xmlns="{MAIN_NS}">'
    '<cellXfs count="2"><xf numFmtId="0"/><xf numFmtId="14" applyNumberFormat="1"/></cellXfs></styleSheet>'
)


def inline(ref: str, text: str) -> str:
    return f'<c r="{ref}" t="inlineStr"><is><t>{text}</t></is></c>'


def row_xml(number: int, values: list) -> str:
    cells = []
    for column, value in enumerate(values):
        ref = f"{chr(65 + column)}{number}"
        if isinstance(value, (int, float)):
            cells.append(f'<c r="{ref}"><v>{value}</v></c>')
        elif value is not None:
            cells.append(inline(ref, value))
    return f'<row r="{number}">{"".join(cells)}</row>'


def sheet_xml(rows: list[str], *, before: str = "", prolog: str = "") -> str:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>{prolog}<worksheet xmlns="{MAIN_NS}" xmlns:r="{REL_NS}">'
        f"{before}<sheetData>{''.join(rows)}</sheetData></worksheet>"
    )


def archive(parts: dict) -> bytes:
    """A ZIP of these parts (name → XML text, or an iterable of byte chunks written as they come,
    so a part of hundreds of megabytes is never held in memory)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zf:
        for name, content in parts.items():
            if content is None:  # named by the workbook, absent from the archive
                continue
            if isinstance(content, str):
                zf.writestr(name, content)
                continue
            with zf.open(name, "w", force_zip64=True) as part:
                for chunk in content:
                    part.write(chunk)
    return out.getvalue()


EMPTY_STRINGS = f'<?xml version="1.0" encoding="UTF-8"?><sst xmlns="{MAIN_NS}"/>'


def xlsx(sheets: dict, *, shared_strings=EMPTY_STRINGS) -> bytes:
    """A workbook with these worksheets (title → XML text or chunks) and shared strings."""
    parts = {
        "[Content_Types].xml": CONTENT_TYPES,
        "_rels/.rels": ROOT_RELS,
        "xl/workbook.xml": _workbook(list(sheets)),
        "xl/_rels/workbook.xml.rels": _workbook_rels(len(sheets)),
        "xl/styles.xml": STYLES,
        "xl/sharedStrings.xml": shared_strings,
    }
    for i, content in enumerate(sheets.values(), start=1):
        parts[f"xl/worksheets/sheet{i}.xml"] = content
    return archive(parts)


def huge_shared_string(megabytes: int = 200) -> bytes:
    """One shared string of `megabytes` MB: ~200 KB compressed (issue 42's first bomb)."""
    head = f'<?xml version="1.0" encoding="UTF-8"?><sst xmlns="{MAIN_NS}" count="1" uniqueCount="1"><si><t>'

    def chunks():
        yield head.encode()
        block = b"A" * (1024 * 1024)
        for _ in range(megabytes):
            yield block
        yield b"</t></si></sst>"

    return xlsx({"nodes": sheet_xml(['<row r="1"><c r="A1" t="s"><v>0</v></c></row>'])}, shared_strings=chunks())


def far_cell() -> bytes:
    """A 1.6 KB file whose dimension claims A1:XFD1048576 and whose one data cell is there (the
    second bomb: a reader that pads rows to the dimension builds 17 billion cells)."""
    sheet = sheet_xml(
        [row_xml(1, NODE_HEADER), '<row r="1048576"><c r="XFD1048576"><v>1</v></c></row>'],
        before='<dimension ref="A1:XFD1048576"/>',
    )
    return xlsx({"nodes": sheet})


def empty_rows(count: int = 1_048_575) -> bytes:
    """A header and then `count` empty <row/> elements (the third: they escaped the row limit)."""
    head = f'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="{MAIN_NS}"><sheetData>{row_xml(1, NODE_HEADER)}'

    def chunks():
        yield head.encode()
        batch = b"<row/>" * 10_000
        for _ in range(count // 10_000):
            yield batch
        yield b"<row/>" * (count % 10_000)
        yield b"</sheetData></worksheet>"

    return xlsx({"nodes": chunks()})


BILLION_LAUGHS = (
    '<!DOCTYPE worksheet [<!ENTITY lol "lol">'
    + "".join(f'<!ENTITY lol{i} "{("&lol" + str(i - 1) + ";") * 10 if i > 1 else "&lol;" * 10}">' for i in range(1, 10))
    + "]>"
)
EXTERNAL_ENTITY = '<!DOCTYPE worksheet [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'


def entity_file(prolog: str = BILLION_LAUGHS, reference: str = "&lol9;") -> bytes:
    """A sheet whose DOCTYPE declares entities and whose first cell uses one."""
    sheet = sheet_xml([row_xml(1, NODE_HEADER), f'<row r="2">{inline("A2", reference)}</row>'], prolog=prolog)
    return xlsx({"nodes": sheet})
