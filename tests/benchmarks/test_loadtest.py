"""`make loadtest`'s verdict from locust's stats rows: which step is within budget, and the
sizing it prints from that step only."""

import pytest

from benchmarks.loadtest import _steps, measure, summary


def _rows(rate: float, p99: float, failures: int = 0) -> list[dict]:
    row = lambda name, r: {  # noqa: E731
        "Name": name,
        "Request Count": str(int(r * 60)),
        "Requests/s": str(r),
        "Failures/s": str(failures / 60),
        "Failure Count": str(failures),
        "50%": "5",
        "99%": str(p99),
    }
    return [row("desired-state", rate / 2), row("heartbeat", rate / 2), row("Aggregated", rate)]


def test_steps_parse_sorted_and_bounded():
    assert _steps("2048,1024, 1536") == [1024, 1536, 2048]
    for bad in ("", "x", "0", "300000"):
        with pytest.raises(SystemExit):
            _steps(bad)


def test_a_step_is_within_only_if_fast_error_free_and_keeping_up():
    ok = measure(_rows(204.0, 17), nodes=1024, workers=2, interval=10)
    assert ok["within"] and ok["heartbeat"]["rate"] == 102.0
    assert not measure(_rows(204.0, 63), nodes=1024, workers=2, interval=10)["within"]  # slow
    assert not measure(_rows(204.0, 17, failures=3), nodes=1024, workers=2, interval=10)["within"]  # errors
    assert not measure(_rows(344.0, 40), nodes=2048, workers=2, interval=10)["within"]  # 410 offered


def test_the_summary_sizes_from_the_highest_step_within_budget():
    steps = [
        measure(_rows(204.0, 17), nodes=1024, workers=2, interval=10),
        measure(_rows(307.0, 63), nodes=1536, workers=2, interval=10),
        measure(_rows(344.0, 5700), nodes=2048, workers=2, interval=10),
    ]
    text = "\n".join(summary(steps))
    assert "1024 agents, 102 heartbeats/s and 102 desired-state polls/s on 2 workers (102 calls/s each)" in text
    assert "web workers per 10,000 nodes (2,000 calls/s) at that rate per worker: 19.6" in text
    assert "over budget from 1536 agents: served 307 of 307 calls/s, p99 63 ms" in text


def test_no_step_within_budget_says_what_to_change():
    text = "\n".join(summary([measure(_rows(100.0, 900), nodes=512, workers=1, interval=10)]))
    assert "no step stayed within" in text and "--workers" in text and "per 10,000" not in text
