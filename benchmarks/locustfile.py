"""Locust scenario: N node agents on their real schedule against a running control plane.

Each locust user is one node: every `HANGAR_LOADTEST_INTERVAL` seconds (10, the agent's
default) it sends a heartbeat with 8 GPUs and their energy counters and polls desired-state
with the ETag of its last answer, as `hangar_agent` does. Each keeps its own phase, a random moment of the interval, as
a real fleet's agents do (each counts from its own boot). Locust starts users in batches once
a second and `constant_pacing` keeps each batch in step, so every second brought a burst of
~N/10 agents at once: at 1,024 agents against `gunicorn -w 2` the p50 was 170 ms in step,
while a lone probe between the bursts saw 4–5 ms. (A random sleep in `on_start` alone is
undone by `constant_pacing`, which paces from the user's start: all N then fire together.) Tokens come from the JSON list at `HANGAR_LOADTEST_TOKENS`
(written by `python -m benchmarks.loadtest`, which also seeds the nodes and starts gunicorn).

Run through `make loadtest` / `python -m benchmarks.loadtest`; by hand:
    locust -f benchmarks/locustfile.py --headless -u 2048 -r 205 -t 60s --host http://127.0.0.1:8000
Not imported by the benchmark registry or the tests (locust patches the standard library).
"""

import itertools
import json
import os
import random
import time
from datetime import UTC, datetime

import gevent
from locust import task
from locust.contrib.fasthttp import FastHttpUser

INTERVAL = float(os.environ.get("HANGAR_LOADTEST_INTERVAL", "10"))
with open(os.environ["HANGAR_LOADTEST_TOKENS"]) as _tokens:
    _next_token = itertools.cycle(json.load(_tokens)).__next__

GPU_WATTS = 520.0
WALL_WATTS = 5200.0  # below the smallest seeded node type's rated maximum (6.5 kW)
GPUS = [
    {
        "index": i,
        "uuid": f"GPU-LOAD-{i}",
        "temperature_c": 61,
        "power_w": GPU_WATTS,
        "utilization_pct": 93.0,
        "memory_used_mb": 71000,
        "ecc_sbe": 0,
        "ecc_dbe": 0,
        "retired_pages": 0,
        "row_remap_pending": 0,
        "row_remap_failed": 0,
        "xid_errors": [],
        "nvlink_down": 0,
    }
    for i in range(8)
]


class NodeAgent(FastHttpUser):
    def on_start(self):
        self.headers = {"Authorization": f"Bearer {_next_token()}", "Accept": "application/json"}
        self.etag = None
        self.booted = time.monotonic()  # the energy counters count from here
        self.due = time.monotonic() + random.uniform(0, INTERVAL)  # this agent's phase
        gevent.sleep(self.due - time.monotonic())

    def wait_time(self):
        """Until this agent's next report, on its own schedule (none of it when it runs late)."""
        self.due += INTERVAL
        return max(0.0, self.due - time.monotonic())

    @task
    def report(self):
        # Cumulative counters, as a real agent sends them (NVML energy per GPU, the BMC's meter):
        # once a minute the control plane integrates them, the heaviest part of a heartbeat.
        up = time.monotonic() - self.booted
        body = {
            "observed_at": datetime.now(UTC).isoformat().replace("+00:00", "Z"),
            "power_state": "on",
            "agent_version": "locust",
            "gpus": [{**gpu, "energy_mj": int(GPU_WATTS * 1000 * up)} for gpu in GPUS],
            "wall_power": {"watts": WALL_WATTS, "source": "bmc", "energy_j": int(WALL_WATTS * up)},
        }
        with self.client.post(
            "/api/agent/v1/heartbeat", json=body, headers=self.headers, name="heartbeat", catch_response=True
        ) as response:
            if response.status_code != 202:
                response.failure(f"HTTP {response.status_code}")
        headers = {**self.headers, "If-None-Match": self.etag} if self.etag else self.headers
        with self.client.get(
            "/api/agent/v1/desired-state", headers=headers, name="desired-state", catch_response=True
        ) as response:
            if response.status_code == 200:
                self.etag = response.headers.get("ETag")
                response.success()
            elif response.status_code == 304:
                response.success()
            else:
                response.failure(f"HTTP {response.status_code}")
