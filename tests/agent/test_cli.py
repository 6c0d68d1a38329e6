"""The console script: clear NVML failure, and one tick against a local fake server."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from hangar_agent.cli import main
from hangar_agent.hardware.nvml import NvmlBackend, NvmlUnavailable


@pytest.fixture(autouse=True)
def restore_logging():
    """main() attaches a stderr handler; drop it so later tests don't log to a closed capture."""
    handlers = list(logging.root.handlers)
    yield
    logging.root.handlers[:] = handlers


def test_nvml_backend_without_gpu_exits_with_clear_message(capsys, tmp_path) -> None:
    try:
        NvmlBackend()
    except NvmlUnavailable:
        pass
    else:
        pytest.skip("this machine has NVML")
    code = main(
        [
            "--url",
            "http://127.0.0.1:9",
            "--token",
            "t",
            "--backend",
            "nvml",
            "--spool",
            str(tmp_path / "s.db"),
            "--once",
        ]
    )
    assert code != 0
    assert "NVML is not available on this machine" in capsys.readouterr().err


def test_once_against_fake_server(tmp_path) -> None:
    seen: list[tuple[str, str, str, dict]] = []

    class Handler(BaseHTTPRequestHandler):
        def _reply(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            seen.append(("GET", self.path, self.headers["Authorization"], {}))
            self._reply(200, {"lifecycle": "available", "allocation_id": None, "tenant_id": None, "actions": []})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            seen.append(("POST", self.path, self.headers["Authorization"], body))
            self._reply(202, {})

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = tmp_path / "agent.toml"
    config.write_text(f'url = "http://127.0.0.1:{server.server_port}"\nseed = 1\n')
    try:
        code = main(
            [
                "--config",
                str(config),
                "--token",
                "agt_1",
                "--backend",
                "simulated",
                "--spool",
                str(tmp_path / "s.db"),
                "--once",
            ]
        )
    finally:
        server.shutdown()
    assert code == 0
    paths = [(m, p) for m, p, _, _ in seen]
    assert ("POST", "/api/agent/v1/heartbeat") in paths and ("GET", "/api/agent/v1/desired-state") in paths
    assert {auth for _, _, auth, _ in seen} == {"Bearer agt_1"}
    heartbeat = next(b for m, p, _, b in seen if p.endswith("heartbeat"))
    assert len(heartbeat["gpus"]) == 8 and heartbeat["power_state"] == "on"


def test_bad_config_exits_2(capsys) -> None:
    assert main(["--url", "ftp://x", "--token", "t", "--backend", "simulated", "--once"]) == 2
    assert "url must start with" in capsys.readouterr().err
