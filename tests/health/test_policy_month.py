"""The policy month simulator: a hand-worked case, determinism, and the command's figures."""

from io import StringIO

import pytest
from django.core.management import CommandError, call_command

from health import simulation
from health.simulation import Fault, judge


def test_a_hand_worked_week_of_five_faults():
    faults = [
        Fault(0.1, 0, 0, "software", ((13, {}),)),  # application: nobody pulls it
        Fault(0.2, 1, 0, "hbm3", ((94, {}), (154, {"recovery_action": 0}))),  # old: 154 → reboot, a false pull
        Fault(0.3, 2, 0, "gpu", ((143, {}),)),  # old: not in the table → info, left taking work
        Fault(0.4, 3, 0, "hbm3", ((48, {}), (63, {}), (154, {"recovery_action": 4}))),  # old fatal, now reset
        Fault(0.5, 4, 0, "gpu", ((79, {}),)),  # both: reboot
        Fault(0.6, 5, 0, "nic", ()),  # no Xid: other rules
    ]
    figures = judge(faults, node_days=1000.0)
    assert figures.faults == 6 and figures.xid_faults == 5
    assert figures.counts == {
        "before_pulls": 3,
        "before_false_pulls": 1,
        "before_left_needing_reset": 1,
        "after_pulls": 3,
        "after_deferred_resets": 1,
    }
    assert figures.per_1000("before_false_pulls") == 1.0 and figures.per_1000("after_false_pulls") == 0.0


def test_the_same_seed_draws_the_same_month_and_every_drawn_xid_is_a_catalogue_row():
    a, b = simulation.draw_month(seed=7, nodes=500), simulation.draw_month(seed=7, nodes=500)
    assert a == b and a != simulation.draw_month(seed=8, nodes=500)
    from health import xid

    drawn = {n for f in a for n, _ in f.events}
    assert drawn and drawn <= set(xid.catalog())


def test_the_command_reports_before_and_after_and_after_has_no_false_pulls():
    out = StringIO()
    call_command("policy_month", "--seed", "1", "--nodes", "2000", stdout=out)
    text = out.getvalue()
    assert "60,000 node-days" in text and "simulated" in text
    false_pulls = next(line for line in text.splitlines() if line.startswith("false pulls"))
    before, after = (float(x) for x in false_pulls.split()[-2:])
    assert before > 0 and after == 0
    left = next(line for line in text.splitlines() if line.startswith("GPUs needing a reset"))
    assert float(left.split()[-1]) == 0


@pytest.mark.parametrize("args", [["--nodes", "0"], ["--days", "9999"], ["--nodes", "1000001"]])
def test_the_command_bounds_its_numbers(args):
    with pytest.raises(CommandError):
        call_command("policy_month", *args, stdout=StringIO())


@pytest.mark.parametrize("seed", [1, 5])
def test_the_figures_in_the_docs_are_what_the_command_measures(seed):
    from health.policy_docs import DOC

    f = simulation.month(seed=seed)
    row = (
        f"| {seed} | {f.per_1000('before_false_pulls'):.3f} | {f.per_1000('after_false_pulls'):.0f} "
        f"| {f.per_1000('before_left_needing_reset'):.3f} | {f.per_1000('after_left_needing_reset'):.0f} "
        f"| {f.per_1000('before_pulls'):.3f} | {f.per_1000('after_pulls'):.3f} |"
    )
    assert row in DOC.read_text()
