"""HTML to PDF for documents that leave the console (certificates of sanitisation, invoices).

WeasyPrint renders the page's own HTML and CSS; the templates it gets are self-contained
(inline CSS, no images), and the URL fetcher refuses everything so that rendering never
reaches the network or the filesystem.

WeasyPrint needs the Pango system library, which a laptop running `make demo` may not have:
it is imported on first use (or by `warm()` when a web process boots), never when this module
is imported, so the console works without it and a PDF link answers a 503 problem that says
how to enable PDFs (`pdf_response`).
"""

import logging

from django.http import HttpResponse, JsonResponse

from core.api.problems import PROBLEM_CONTENT_TYPE, problem_body

ENABLE_PDFS = (
    "PDF rendering needs WeasyPrint's system library Pango: install it (Debian/Ubuntu: "
    "apt-get install libpango-1.0-0 libpangoft2-1.0-0; macOS: brew install pango) and restart the "
    "server. The same document is shown as a page in the console meanwhile."
)


class PdfUnavailable(RuntimeError):
    """WeasyPrint cannot be loaded here (Pango missing); the message says how to fix it."""


_weasyprint = None
_missing: str | None = None


def _load():
    global _weasyprint, _missing
    if _weasyprint is not None:
        return _weasyprint
    if _missing is not None:
        raise PdfUnavailable(_missing)
    # WeasyPrint and fontTools log every step (even parsing its stylesheet on import) at INFO:
    # keep the application log readable. Set before the import so the import is quiet too.
    for name in ("weasyprint", "fontTools"):
        logging.getLogger(name).setLevel(logging.WARNING)
    try:
        import weasyprint
    except (ImportError, OSError) as exc:  # OSError: cffi could not dlopen Pango
        _missing = f"{ENABLE_PDFS} ({exc})"
        raise PdfUnavailable(_missing) from exc
    _weasyprint = weasyprint
    return weasyprint


def pdf_unavailable_reason() -> str | None:
    """None when PDFs can be rendered here; otherwise what is missing and how to add it."""
    try:
        _load()
    except PdfUnavailable as exc:
        return str(exc)
    return None


def warm() -> None:
    """Import WeasyPrint now if it can be (its import takes seconds): a web process calls this
    at boot so the first PDF request does not wait; without Pango it does nothing."""
    pdf_unavailable_reason()


def _no_fetch(url: str, *args, **kwargs):
    raise ValueError(f"console PDFs load no external resources ({url})")


def html_to_pdf_bytes(html: str) -> bytes:
    """Any self-contained console document (certificates, invoices) as PDF; PdfUnavailable
    when WeasyPrint cannot be loaded here."""
    return _load().HTML(string=html, url_fetcher=_no_fetch).write_pdf()


def certificate_pdf_bytes(html: str) -> bytes:
    return html_to_pdf_bytes(html)


def pdf_response(html: str, filename: str) -> HttpResponse:
    """The document as a PDF attachment, or a 503 problem saying how to enable PDFs."""
    try:
        content = html_to_pdf_bytes(html)
    except PdfUnavailable as exc:
        response = JsonResponse(
            problem_body(503, "pdf_unavailable", str(exc)), status=503, content_type=PROBLEM_CONTENT_TYPE
        )
        return response
    response = HttpResponse(content, content_type="application/pdf")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
