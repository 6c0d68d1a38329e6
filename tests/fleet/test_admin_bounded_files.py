"""Files that cannot take a worker down (issue 42, docs/admin.md "Limits"): the XLSX bombs and the
entity files are refused with a sentence after reading a few bytes, rows or cells, in a worker
whose memory hardly grows (measured in a subprocess); every malformed file is a 400 with a
sentence; CSV is held to the same limits (rows, cells per row, characters per cell)."""

import io
import json
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet.bounded_xlsx import EXCEL_CELL_CHARS, Limits, column_letters
from fleet.inventory_files import read_workbook
from fleet.models import Node

from . import xlsx_bombs as bombs
from .admin_helpers import client_for, staff_with

REPO = Path(__file__).resolve().parents[2]
RSS_BUDGET_MB = 300  # the bound for a worker reading any of these files

BOMBS = {
    "200 MB shared string": bombs.huge_shared_string,
    "dimension A1:XFD1048576 with a far cell": bombs.far_cell,
    "1,048,575 empty rows": bombs.empty_rows,
    "billion laughs": bombs.entity_file,
    "external entity": lambda: bombs.entity_file(bombs.EXTERNAL_ENTITY, "&xxe;"),
}
# what each refusal says, and the most it may have read before saying it
EXPECTED = {
    "200 MB shared string": ("more than 32,767 characters", {"inflated_bytes": 1024 * 1024}),
    "dimension A1:XFD1048576 with a far cell": ("beyond column BL", {"cells": 10, "rows": 2}),
    "1,048,575 empty rows": ("more than 60,000 rows (blank rows count too)", {"rows": 60_000 + 2}),
    "billion laughs": ("declares XML entities or a DTD", {"rows": 0, "cells": 0}),
    "external entity": ("declares XML entities or a DTD", {"rows": 0, "cells": 0}),
}


@pytest.fixture(scope="module")
def bomb_files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("bombs")
    paths = {}
    for name, build in BOMBS.items():
        path = folder / (name.replace(" ", "_").replace(",", "") + ".xlsx")
        path.write_bytes(build())
        paths[name] = path
    return paths


@pytest.mark.parametrize("name", list(BOMBS))
def test_each_bomb_is_refused_with_a_sentence_after_reading_little(bomb_files, name):
    data = bomb_files[name].read_bytes()
    assert len(data) < 250 * 1024  # they are small files: the upload cap does not stop them
    book = read_workbook("inventory.xlsx", data, csv_sheet="nodes", max_rows=60_000)
    says, at_most = EXPECTED[name]
    assert book.sheets == {} and len(book.problems) == 1
    assert says in book.problems[0] and book.problems[0].endswith(".")
    for measure, bound in at_most.items():
        assert getattr(book.stats, measure) <= bound, (measure, book.stats)


RSS_PROBE = textwrap.dedent(
    """
    import json, resource, sys, time
    sys.path.insert(0, sys.argv[1])
    from fleet.inventory_files import read_workbook
    data = open(sys.argv[2], "rb").read()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    book = read_workbook("inventory.xlsx", data, csv_sheet="nodes", max_rows=60_000)
    elapsed = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps({"growth_kb": after - before, "problems": book.problems, "elapsed_s": elapsed}))
    """
)


@pytest.mark.slow  # subprocess
@pytest.mark.parametrize("name", list(BOMBS))
def test_reading_a_bomb_grows_a_fresh_worker_by_far_less_than_300_mb(bomb_files, name):
    """A process of its own, so its peak RSS is this file's alone (ru_maxrss, in KiB on Linux)."""
    done = subprocess.run(
        [sys.executable, "-c", RSS_PROBE, str(REPO), str(bomb_files[name])],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert result["problems"], result
    assert result["growth_kb"] < RSS_BUDGET_MB * 1024, result
    assert result["growth_kb"] < 64 * 1024, result  # in fact a few MiB: the margin is wide


@pytest.fixture
def importer(django_user_model):
    """Only fleet.add_node, as the operators group has: enough to upload."""
    return client_for(Client, staff_with(django_user_model, "importer", "fleet.add_node", "fleet.view_node"))


def _upload(client, data: bytes, name="inventory.xlsx"):
    upload = SimpleUploadedFile(name, data, content_type="application/octet-stream")
    return client.post(reverse("admin:fleet_node_import"), {"file": upload})


@pytest.mark.django_db
@pytest.mark.parametrize("name", list(BOMBS))
def test_the_import_page_answers_each_bomb_with_400_and_its_sentence(bomb_files, importer, name):
    response = _upload(importer, bomb_files[name].read_bytes())
    assert response.status_code == 400
    assert EXPECTED[name][0] in response.content.decode()
    assert "staged" not in response.context or not response.context.get("staged")
    assert not Node.objects.exists()


def _valid() -> bytes:
    return bombs.xlsx({"nodes": bombs.sheet_xml([bombs.row_xml(1, bombs.NODE_HEADER)])})


MALFORMED = {
    "random bytes": b"\x00\x01not a zip at all" * 10,
    "truncated archive": _valid()[:300],
    "zip without a workbook": bombs.archive({"hello.txt": "hi"}),
    "workbook that is not XML": bombs.archive({"_rels/.rels": bombs.ROOT_RELS, "xl/workbook.xml": "<<<not xml"}),
    "sheet that is not XML": bombs.xlsx({"nodes": "<worksheet><sheetData><row></worksheet>"}),
    "cell naming no cell": bombs.xlsx({"nodes": bombs.sheet_xml(['<row r="1"><c r="1A"><v>1</v></c></row>'])}),
    "row numbered past the sheet": bombs.xlsx({"nodes": bombs.sheet_xml(['<row r="9999999"><c><v>1</v></c></row>'])}),
    "shared string that does not exist": bombs.xlsx(
        {"nodes": bombs.sheet_xml(['<row r="1"><c r="A1" t="s"><v>7</v></c></row>'])}
    ),
    "sheet whose part is missing": bombs.xlsx({"nodes": None}),
    "entity in the workbook part": bombs.archive(
        {"_rels/.rels": bombs.ROOT_RELS, "xl/workbook.xml": bombs.EXTERNAL_ENTITY + "<workbook/>"}
    ),
    "a hundred sheets": bombs.xlsx({f"s{i}": bombs.sheet_xml([]) for i in range(100)}),
}


@pytest.mark.django_db
@pytest.mark.parametrize("name", list(MALFORMED))
def test_every_malformed_file_is_a_400_with_a_sentence(importer, name):
    response = _upload(importer, MALFORMED[name])
    assert response.status_code == 400, name
    errors = [str(e) for e in response.context["errors"]]
    assert errors and all(e.endswith(".") for e in errors), errors


@pytest.mark.slow  # fuzz
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_workbook_with_bytes_flipped_anywhere_reads_or_says_why(data):
    """Neighbours of a valid file: any byte changed gives rows or problems, never an exception."""
    valid = bombs.xlsx(
        {"nodes": bombs.sheet_xml([bombs.row_xml(1, bombs.NODE_HEADER), bombs.row_xml(2, ["n1", "s1", "r1", 3, "t"])])}
    )
    position = data.draw(st.integers(0, len(valid) - 1))
    value = data.draw(st.integers(0, 255))
    mutated = valid[:position] + bytes([value]) + valid[position + 1 :]
    book = read_workbook("x.xlsx", mutated, csv_sheet="nodes", max_rows=100)
    assert book.sheets or book.problems


XML_BITS = st.sampled_from(
    [
        "<",
        ">",
        "/",
        '"',
        "=",
        "r",
        "c",
        "row",
        "v",
        "t",
        "s",
        "is",
        " ",
        "A1",
        "XFD9",
        "1",
        "-1",
        "&amp;",
        "&x;",
        "<?x?>",
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_a_sheet_with_its_xml_edited_anywhere_reads_or_says_why(data):
    """Neighbours inside the XML (the archive stays valid): any stretch of the sheet replaced by
    XML-ish text gives rows or problems, never an exception."""
    xml = bombs.sheet_xml([bombs.row_xml(1, bombs.NODE_HEADER), bombs.row_xml(2, ["n1", "s1", "r1", 3, "t"])])
    start = data.draw(st.integers(0, len(xml)))
    end = data.draw(st.integers(start, min(len(xml), start + 20)))
    filler = "".join(data.draw(st.lists(XML_BITS, max_size=6)))
    book = read_workbook(
        "x.xlsx", bombs.xlsx({"nodes": xml[:start] + filler + xml[end:]}), csv_sheet="nodes", max_rows=100
    )
    assert book.sheets or book.problems


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_are_a_problem_not_an_exception(blob):
    for name in ("x.xlsx", "x.csv"):
        book = read_workbook(name, blob, csv_sheet="nodes", max_rows=100)
        assert book.sheets or book.problems


# ---- the limits at their edges, both formats -----------------------------------------------


def _csv(rows: list[str]) -> bytes:
    return ("\n".join([",".join(bombs.NODE_HEADER), *rows]) + "\n").encode()


def _xlsx_rows(rows: list[list]) -> bytes:
    body = [bombs.row_xml(1, bombs.NODE_HEADER)]
    for offset, row in enumerate(rows, start=2):
        body.append(bombs.row_xml(offset, row) if row else f'<row r="{offset}"/>')
    return bombs.xlsx({"nodes": bombs.sheet_xml(body)})


@pytest.mark.parametrize("limit", [1, 2])
@pytest.mark.parametrize("blank", [False, True])
def test_the_row_limit_counts_blank_rows_in_both_formats(limit, blank):
    row_csv, row_xlsx = ("", []) if blank else ("n1,s1,r1,3,t", ["n1", "s1", "r1", 3, "t"])
    for name, build in (("x.csv", lambda n: _csv([row_csv] * n)), ("x.xlsx", lambda n: _xlsx_rows([row_xlsx] * n))):
        limits = Limits(max_rows=limit)
        at = read_workbook(name, build(limit), csv_sheet="nodes", max_rows=limit, limits=limits)
        assert at.problems == [], (name, at.problems)
        over = read_workbook(name, build(limit + 1), csv_sheet="nodes", max_rows=limit, limits=limits)
        assert over.problems and "blank rows count too" in over.problems[0], (name, over.problems)


@pytest.mark.parametrize("columns", [1, 2, 64])
def test_a_cell_beyond_the_column_limit_is_refused_in_both_formats(columns):
    limits = Limits(max_columns=columns)
    fits_csv = ("a" + ",b" * (columns - 1) + "\n").encode()
    assert read_workbook("x.csv", fits_csv, csv_sheet="nodes", max_rows=10, limits=limits).problems == []
    over_csv = ("a" + ",b" * columns + "\n").encode()
    assert "at most" in read_workbook("x.csv", over_csv, csv_sheet="nodes", max_rows=10, limits=limits).problems[0]
    last, beyond = column_letters(columns), column_letters(columns + 1)
    fits = bombs.xlsx({"nodes": bombs.sheet_xml([f'<row r="1">{bombs.inline(f"{last}1", "x")}</row>'])})
    assert read_workbook("x.xlsx", fits, csv_sheet="nodes", max_rows=10, limits=limits).problems == []
    over = bombs.xlsx({"nodes": bombs.sheet_xml([f'<row r="1">{bombs.inline(f"{beyond}1", "x")}</row>'])})
    assert (
        f"cell at {beyond}1" in read_workbook("x.xlsx", over, csv_sheet="nodes", max_rows=10, limits=limits).problems[0]
    )


def test_a_cell_longer_than_a_spreadsheet_cell_is_refused_in_both_formats():
    fits, over = "x" * EXCEL_CELL_CHARS, "x" * (EXCEL_CELL_CHARS + 1)
    assert read_workbook("x.csv", _csv([f"{fits},s,r,1,t"]), csv_sheet="nodes", max_rows=10).problems == []
    assert (
        "32,767 characters"
        in read_workbook("x.csv", _csv([f"{over},s,r,1,t"]), csv_sheet="nodes", max_rows=10).problems[0]
    )
    assert read_workbook("x.xlsx", _xlsx_rows([[fits]]), csv_sheet="nodes", max_rows=10).problems == []
    assert (
        "32,767 characters" in read_workbook("x.xlsx", _xlsx_rows([[over]]), csv_sheet="nodes", max_rows=10).problems[0]
    )


def test_a_csv_line_of_a_million_commas_is_refused_before_it_is_split():
    book = read_workbook("x.csv", _csv(["," * 1_000_000]), csv_sheet="nodes", max_rows=10)
    assert book.problems and "longer than" in book.problems[0]
    assert book.stats.cells <= len(bombs.NODE_HEADER)  # the csv module never built that row


def test_a_million_blank_csv_lines_stop_at_the_row_limit():
    book = read_workbook("x.csv", _csv([""] * 1_000_000), csv_sheet="nodes", max_rows=60_000)
    assert "blank rows count too" in book.problems[0] and book.stats.rows == 60_001


def test_values_read_as_the_spreadsheet_shows_them():
    """Text, whole numbers, booleans and date-formatted numbers (style 1 is numFmt 14, a date);
    cells placed by their reference, with gaps as None, and the sheet's real row numbers."""
    sheet = bombs.sheet_xml(
        [
            bombs.row_xml(2, ["hostname", "u_position", "commissioned_on", "flag"]),
            '<row r="5"><c r="A5" t="inlineStr"><is><r><t>n</t></r><r><t>1</t></r></is></c>'
            '<c r="C5" s="1"><v>46000</v></c><c r="D5" t="b"><v>1</v></c></row>',
            '<row r="6"><c r="B6"><v>3.0</v></c><c r="D6" t="str"><f>A1</f><v>text</v></c></row>',
        ]
    )
    book = read_workbook("x.xlsx", bombs.xlsx({"nodes": sheet}), csv_sheet="nodes", max_rows=10)
    rows = book.sheets["nodes"].rows
    assert [n for n, _ in rows] == [5, 6]
    assert rows[0][1][0] == "n1" and rows[0][1][1] is None and rows[0][1][2].date().isoformat() == "2025-12-09"
    assert rows[0][1][3] is True and rows[1][1] == [None, 3, None, "text"]


def test_an_encrypted_member_is_a_sentence_not_a_traceback():
    data = bytearray(_valid())
    # set the "encrypted" flag bit on every local and central header: zipfile then asks for a password
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        start = 0
        while (start := data.find(signature, start)) != -1:
            data[start + offset] |= 1
            start += 4
    book = read_workbook("x.xlsx", bytes(data), csv_sheet="nodes", max_rows=10)
    assert book.problems and book.problems[0].endswith(".")
    assert zipfile.is_zipfile(io.BytesIO(bytes(data)))
