"""Out-of-band power through a real Redfish service (sushy-emulator): actions, the power sync
loop, drift, deadlines, and the failures an operator must be able to act on."""

from datetime import timedelta

import pytest
from django.db import connection, connections
from django.test import override_settings
from django.utils import timezone

from core.models import AuditEvent
from devtools.redfish_emulator import free_port, system_mac
from fleet.choices import BMCErrorKind, PowerActionState, PowerState
from fleet.models import BMCPowerAction, Node, NodeBMC, NodeEvent
from fleet.services import bmc as redfish
from fleet.services.bmc_credentials import set_bmc, target_for
from fleet.services.power_actions import PowerActionRefused, perform_power_action, request_power_action
from fleet.services.power_sync import fail_overdue, power_sync_pass, run_power_sync
from tests.redfish import allow_lab_bmc, attach_bmc

FAST_RETRIES = {"BMC_RETRIES": 1, "BMC_RETRY_BACKOFF_S": 0.01, "BMC_CONNECT_TIMEOUT_S": 0.5}


@pytest.fixture
def node(small_fleet):
    return Node.objects.order_by("hostname").first()


def sync():
    return power_sync_pass(budget_s=30)


def test_credentials_are_encrypted_at_rest_and_never_audited(node, redfish_emulator, emulated_system):
    bmc = attach_bmc(node, redfish_emulator, emulated_system())
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT username_encrypted, password_encrypted FROM fleet_nodebmc WHERE id = %s",
            [bmc.pk.hex if connection.vendor == "sqlite" else bmc.pk],
        )
        username_raw, password_raw = cursor.fetchone()
    assert redfish_emulator.password not in password_raw and password_raw.startswith("gAAAA")  # a Fernet token
    assert redfish_emulator.username not in username_raw
    assert target_for(bmc).password == redfish_emulator.password
    audit = AuditEvent.objects.get(action="node.bmc_set", object_id=str(node.pk))
    assert redfish_emulator.password not in str(audit.after) and audit.after["credentials_set"] is True


def test_power_off_then_on_is_confirmed_by_the_sync_loop(node, redfish_emulator, emulated_system):
    system = emulated_system()
    attach_bmc(node, redfish_emulator, system)
    off = perform_power_action(node=node, action="force_off", actor="user:op", reason="cabling")
    assert off.state == PowerActionState.ACCEPTED and off.reset_type == "ForceOff"
    assert redfish_emulator.wait_for_power(system, "Off") == "Off"
    summary = sync()
    off.refresh_from_db()
    node.refresh_from_db()
    assert off.state == PowerActionState.SUCCEEDED and node.power_state == PowerState.OFF
    assert summary["confirmed"] == 1 and summary["drift"] == 0

    on = perform_power_action(node=node, action="power_on", actor="user:op")
    assert on.reset_type == "On"
    assert redfish_emulator.wait_for_power(system, "On") == "On"
    sync()
    on.refresh_from_db()
    node.refresh_from_db()
    assert on.state == PowerActionState.SUCCEEDED and node.power_state == PowerState.ON
    trail = list(NodeEvent.objects.filter(node=node).values_list("action", flat=True))
    assert {"power_force_off", "power_force_off_sent", "power_force_off_done", "power_power_on_done"} <= set(trail)


def test_power_cycle_uses_the_hard_restart_the_bmc_offers(node, redfish_emulator, emulated_system):
    system = emulated_system()
    attach_bmc(node, redfish_emulator, system)
    cycle = perform_power_action(node=node, action="power_cycle", actor="user:op")
    # The emulated BMC lists no PowerCycle; its nearest equivalent is sent.
    assert cycle.state == PowerActionState.ACCEPTED and cycle.reset_type == "ForceRestart"
    assert redfish_emulator.power_state(system) == "Off"  # the restart took it down...
    assert redfish_emulator.wait_for_power(system, "On") == "On"  # ...and brought it back
    sync()
    cycle.refresh_from_db()
    assert cycle.state == PowerActionState.SUCCEEDED


def test_asking_twice_is_the_same_action_and_a_different_one_waits(node, redfish_emulator, emulated_system):
    attach_bmc(node, redfish_emulator, emulated_system())
    first = request_power_action(node=node, action="force_off", actor="user:op")
    again = request_power_action(node=node, action="force_off", actor="user:op")
    assert first.pk == again.pk
    with pytest.raises(PowerActionRefused) as refused:
        request_power_action(node=node, action="power_on", actor="user:op")
    assert refused.value.code == "power_action_in_progress"
    assert BMCPowerAction.objects.filter(node=node).count() == 1


@override_settings(**FAST_RETRIES)
def test_an_unreachable_bmc_is_reported_with_what_to_do(node):
    dead = allow_lab_bmc(f"http://127.0.0.1:{free_port()}")  # a lab BMC that does not answer
    set_bmc(node=node, redfish_url=dead, username="admin", password="pw", actor="test")
    action = perform_power_action(node=node, action="power_cycle", actor="user:op")
    node.refresh_from_db()
    assert action.state == PowerActionState.FAILED
    assert "did not answer" in action.detail and "Check the BMC's network port" in action.detail
    assert node.last_error.startswith("BMC power cycle failed")
    sync()
    bmc = NodeBMC.objects.get(node=node)
    assert bmc.reachable is False and bmc.last_error_kind == BMCErrorKind.UNREACHABLE


def test_bad_credentials_are_named_as_such(node, redfish_emulator, emulated_system):
    attach_bmc(node, redfish_emulator, emulated_system(), password="not-the-password")
    action = perform_power_action(node=node, action="force_off", actor="user:op")
    assert action.state == PowerActionState.FAILED
    assert "refused the login" in action.detail and "HTTP 401" in action.detail
    sync()
    bmc = NodeBMC.objects.get(node=node)
    assert bmc.last_error_kind == BMCErrorKind.BAD_CREDENTIALS and bmc.reachable is True
    node.refresh_from_db()
    assert "Enter the BMC's current username and password" in node.last_error


def test_an_action_the_bmc_refuses(node, refusing_emulator):
    attach_bmc(node, refusing_emulator, "locked-000")
    action = perform_power_action(node=node, action="force_off", actor="user:op")
    assert action.state == PowerActionState.FAILED
    assert "refused force off" in action.detail and "HTTP 400" in action.detail


def test_an_action_the_bmc_does_not_offer(node, redfish_emulator, emulated_system):
    bmc = attach_bmc(node, redfish_emulator, emulated_system())
    with pytest.raises(redfish.BMCError) as error:
        redfish.reset_bmc_to_defaults(target_for(bmc))
    assert error.value.kind == BMCErrorKind.NOT_SUPPORTED and "ResetToDefaults" in error.value.detail


def test_drift_is_recorded_once_and_cleared(node, redfish_emulator, emulated_system):
    system = emulated_system()
    attach_bmc(node, redfish_emulator, system)
    perform_power_action(node=node, action="power_on", actor="user:op")  # already on: desired on
    sync()
    assert redfish_emulator.reset(system, "ForceOff") == 204  # someone at the rack
    assert redfish_emulator.wait_for_power(system, "Off") == "Off"
    first, second = sync(), sync()
    assert first["drift"] == 1 and second["drift"] == 0
    assert NodeEvent.objects.filter(node=node, action="power_drift").count() == 1
    redfish_emulator.reset(system, "On")
    redfish_emulator.wait_for_power(system, "On")
    sync()
    assert NodeEvent.objects.filter(node=node, action="power_drift_cleared").count() == 1


def test_an_action_not_seen_done_by_its_deadline_fails_with_the_reason(node, redfish_emulator, emulated_system):
    attach_bmc(node, redfish_emulator, emulated_system())
    action = perform_power_action(node=node, action="force_off", actor="user:op")
    assert fail_overdue(now=timezone.now() + timedelta(minutes=3)) == 1
    action.refresh_from_db()
    node.refresh_from_db()
    assert action.state == PowerActionState.FAILED and "not seen off by the deadline" in action.detail
    assert node.last_error == action.detail


def test_inventory_reads_identity_and_macs(node, redfish_emulator, emulated_system):
    system = emulated_system()
    bmc = attach_bmc(node, redfish_emulator, system)
    inventory = redfish.read_inventory(target_for(bmc))
    assert inventory.name == system and inventory.serial == inventory.uuid  # the emulator has no SerialNumber
    assert inventory.macs == sorted([system_mac(system, 0), system_mac(system, 1)])
    assert redfish.read_power_watts(target_for(bmc)) is None  # no chassis power readings on the emulator
    with pytest.raises(redfish.BMCError) as no_firmware:  # nor firmware inventory members
        redfish.read_firmware_inventory(target_for(bmc))
    assert no_firmware.value.kind in (BMCErrorKind.NOT_SUPPORTED, BMCErrorKind.NOT_FOUND)
    assert "firmware inventory" in no_firmware.value.detail


def test_a_wrong_system_path_says_so(node, redfish_emulator):
    bmc = attach_bmc(node, redfish_emulator, "sys-000")
    NodeBMC.objects.filter(pk=bmc.pk).update(system_path="/redfish/v1/Systems/no-such-system")
    bmc.refresh_from_db()
    with pytest.raises(redfish.BMCError) as error:
        redfish.read_power_state(target_for(bmc))
    assert error.value.kind == BMCErrorKind.NOT_FOUND and "Correct the system path" in error.value.detail


@pytest.mark.django_db(transaction=True)
def test_the_sync_holds_no_transaction_while_bmcs_answer(node, redfish_emulator, emulated_system, monkeypatch):
    """The pass's BMC reads run with no transaction open: rows written for one batch are not
    held locked (and on SQLite no write of any process waits) until the last BMC answers."""
    attach_bmc(node, redfish_emulator, emulated_system())
    main = connections["default"]  # the pass's own connection (the reads run on pool threads)
    seen = []
    read = redfish.read_power_state

    def reading(target):
        seen.append(main.in_atomic_block)
        return read(target)

    monkeypatch.setattr(redfish, "read_power_state", reading)
    with override_settings(BMC_POWER_READS_PER_PASS=0):
        summary = run_power_sync()
    assert summary["read"] == 1 and seen == [False]
