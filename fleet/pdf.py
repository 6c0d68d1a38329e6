"""HTML to PDF for documents that leave the console (certificates of sanitisation, invoices).

WeasyPrint renders the page's own HTML and CSS; the templates it gets are self-contained
(inline CSS, no images), and the URL fetcher refuses everything so that rendering never
reaches the network or the filesystem.
"""

import logging

# WeasyPrint and fontTools log every step (even parsing its stylesheet on import) at INFO:
# keep the application log readable. Set before the import so the import is quiet too.
for _name in ("weasyprint", "fontTools"):
    logging.getLogger(_name).setLevel(logging.WARNING)

import weasyprint  # noqa: E402


def _no_fetch(url: str, *args, **kwargs):
    raise ValueError(f"console PDFs load no external resources ({url})")


def html_to_pdf_bytes(html: str) -> bytes:
    """Any self-contained console document (certificates, invoices) as PDF."""
    return weasyprint.HTML(string=html, url_fetcher=_no_fetch).write_pdf()


def certificate_pdf_bytes(html: str) -> bytes:
    return html_to_pdf_bytes(html)
