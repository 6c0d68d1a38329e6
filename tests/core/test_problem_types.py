"""Problem `type` URIs lead to pages of this server that say what each code means; every code
the source can raise has a row in its app's problems.csv, and every row is raised somewhere."""

import pytest
from django.test import Client
from django.utils.html import escape

from core.problem_types import DOCS_PATH, problem_type, problem_types, register

from .problem_scan import raised_codes


def test_every_code_the_source_raises_has_a_row_and_every_row_is_raised():
    codes, computed = raised_codes()
    assert len(codes) > 50  # the scan sees the API's codes (Problem, DomainError subclasses, …)
    assert not computed, f"a problem code the scan cannot read; name it as a literal: {computed}"
    registered = {p.code for p in problem_types()}
    missing = {code: sorted(files) for code, files in codes.items() if code not in registered}
    assert not missing, f"add a row to the raising app's problems.csv for: {missing}"
    unused = registered - set(codes)
    assert not unused, f"rows no code raises (remove them): {sorted(unused)}"


def test_each_row_belongs_to_an_app_that_raises_it_or_to_core():
    codes, _ = raised_codes()
    for problem in problem_types():
        apps = {path.split("/")[0] for path in codes[problem.code]}
        assert problem.app in apps or problem.app == "core", (problem.code, problem.app, apps)


@pytest.mark.django_db
def test_each_problem_type_has_a_public_page_with_title_status_meaning_and_what_to_do():
    client = Client()
    index = client.get(DOCS_PATH).content.decode()
    for problem in problem_types():
        assert f'href="{problem.uri}"' in index
        response = client.get(problem.uri)
        assert response.status_code == 200, problem.code
        page = response.content.decode()
        for text in (problem.title, problem.meaning, problem.what_to_do, str(problem.statuses[0])):
            assert escape(text) in page, (problem.code, text)
    assert client.get(f"{DOCS_PATH}no_such_code").status_code == 404


@pytest.mark.django_db
def test_an_api_problem_names_its_page_and_the_page_explains_it(api):
    response = api.get("/api/v1/allocations")
    assert response.status_code == 401
    problem = response.json()
    assert problem["type"] == "/docs/problems/not_authenticated"
    page = Client().get(problem["type"])
    assert page.status_code == 200 and escape(problem_type("not_authenticated").what_to_do) in page.content.decode()


def test_a_malformed_or_duplicate_row_stops_start_up(tmp_path):
    from django.core.exceptions import ImproperlyConfigured

    header = "code,status,title,meaning,what_to_do\n"
    bad = {
        "status": header + "some_code,200,T,M,W\n",
        "code": header + "Some-Code,400,T,M,W\n",
        "empty": header + "some_code,400,T,,W\n",
        "duplicate": header + "not_found,404,T,M,W\n",  # core registered it
    }
    for name, text in bad.items():
        path = tmp_path / f"{name}.csv"
        path.write_text(text)
        with pytest.raises(ImproperlyConfigured):
            register("elsewhere", path)
