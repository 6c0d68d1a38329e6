"""The demo's stand-in for PagerDuty and for tenants' webhook receivers: answers 200 to every
POST and appends what it received (path, event type, dedup key, signature header present) to a
log file, so `make demo` shows pages and deliveries end to end with no external service.

    python -m devtools.notification_sink --port 8002 --log var/demo-notifications.log
"""

import argparse
import json
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MAX_BODY = 1 << 20


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=8002)
    parser.add_argument("--log", default="var/demo-notifications.log")
    args = parser.parse_args(argv)

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY)
            body = self.rfile.read(length)
            try:
                document = json.loads(body)
            except ValueError:
                document = {}
            line = {
                "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "path": self.path[:200],
                "type": document.get("type") or document.get("event_action"),
                "dedup_key": document.get("dedup_key"),
                "signed": bool(self.headers.get("Hangar-Signature")),
            }
            with open(args.log, "a", encoding="utf-8") as log:
                log.write(json.dumps(line) + "\n")
            self.send_response(202 if "pagerduty" in self.path else 200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"status": "success", "message": "Event processed"}')

        def log_message(self, *args):
            pass

    ThreadingHTTPServer(("127.0.0.1", args.port), Handler).serve_forever()


if __name__ == "__main__":
    main()
