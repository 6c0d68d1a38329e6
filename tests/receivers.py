"""Real receivers for the notification tests: a local HTTP server that records each request and
checks its webhook signature, and a local SMTP server (aiosmtpd) that keeps each message.

Both listen on 127.0.0.1; the HTTP receiver's origin is made a lab origin of the webhook guard
for the test (as tests/redfish.py does for the BMC emulator), never in production settings."""

import json
import socket
import threading
from dataclasses import dataclass, field
from email import message_from_bytes
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from core.netguard import origin_of
from core.transports import SIGNATURE_HEADER, verify_signature


@dataclass
class Received:
    path: str
    headers: dict
    body: bytes
    signature_ok: bool | None

    @property
    def json(self) -> dict:
        return json.loads(self.body)


@dataclass
class Receiver:
    url: str
    secret: str = "whsec_test_receiver_secret"
    status: int = 200  # what it answers; set to 500 to make deliveries fail
    requests: list[Received] = field(default_factory=list)


@pytest.fixture
def webhook_receiver(settings):
    receiver = Receiver(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            header = self.headers.get(SIGNATURE_HEADER)
            ok = verify_signature(receiver.secret, header, body, tolerance_s=300) if header else None
            receiver.requests.append(Received(self.path, dict(self.headers), body, ok))
            self.send_response(receiver.status)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"status": "received"}')

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    receiver.url = f"http://127.0.0.1:{server.server_address[1]}/hook"
    settings.NOTIFY_LAB_ORIGINS = {*settings.NOTIFY_LAB_ORIGINS, origin_of(receiver.url)}
    yield receiver
    server.shutdown()
    server.server_close()


@dataclass
class Mailbox:
    messages: list = field(default_factory=list)

    def by_subject(self, text: str) -> list:
        return [m for m in self.messages if text in m["Subject"]]


@pytest.fixture
def smtp_server(settings):
    from aiosmtpd.controller import Controller

    mailbox = Mailbox()

    class Handler:
        async def handle_DATA(self, server, session, envelope):
            message = message_from_bytes(envelope.content)
            message["X-Envelope-To"] = ", ".join(envelope.rcpt_tos)
            mailbox.messages.append(message)
            return "250 Message accepted for delivery"

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    controller = Controller(Handler(), hostname="127.0.0.1", port=port)
    controller.start()
    settings.NOTIFY_EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_USE_TLS = "127.0.0.1", port, False
    yield mailbox
    controller.stop()
