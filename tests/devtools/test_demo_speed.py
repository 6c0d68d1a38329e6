"""`HANGAR_DEMO_SPEED=60 make demo`: the demo's simulator at that speed, everything else as it was."""

import pytest


def test_the_demo_runs_its_simulator_at_the_speed_asked():
    from devtools.demo import DEMO_PROCESSES, demo_processes

    assert demo_processes(None) == DEMO_PROCESSES
    fast = dict(demo_processes(60))
    assert fast["fleet simulator"][-2:] == ("--speed", "60")
    assert fast["web"] == dict(DEMO_PROCESSES)["web"]
    for bad in (-1, 10**6):
        with pytest.raises(ValueError):
            demo_processes(bad)
