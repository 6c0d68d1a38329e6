"""A real Redfish BMC for the tests: sushy-tools' emulator (fake systems driver) started once
per session on a free port, with basic auth. Each test takes systems of its own from the pool
(`emulated_system`), so the power states one test leaves behind never meet another's."""

import itertools

import pytest

from devtools.redfish_emulator import RedfishEmulator

POOL = [f"sys-{i:03d}" for i in range(64)]
_next = itertools.count()


def allow_lab_bmc(url: str) -> str:
    """Let the BMC network policy reach a test's own Redfish server on loopback (a lab origin,
    as `make demo`'s emulator is); everything else on loopback stays refused."""
    from django.conf import settings

    from core.netguard import origin_of

    settings.BMC_LAB_ORIGINS.add(origin_of(url))
    return url


@pytest.fixture(scope="session")
def redfish_emulator():
    emulator = RedfishEmulator(systems=POOL).start()
    allow_lab_bmc(emulator.url)
    yield emulator
    emulator.stop()


@pytest.fixture(scope="session")
def refusing_emulator():
    """A BMC that refuses every power-off (SUSHY_EMULATOR_DISABLE_POWER_OFF): HTTP 400."""
    emulator = RedfishEmulator(systems=["locked-000"], disable_power_off=True).start()
    allow_lab_bmc(emulator.url)
    yield emulator
    emulator.stop()


@pytest.fixture
def emulated_system(redfish_emulator):
    """A system name no other test uses, powered on."""

    def take() -> str:
        name = POOL[next(_next) % len(POOL)]
        if redfish_emulator.power_state(name) != "On":
            redfish_emulator.reset(name, "On")
            assert redfish_emulator.wait_for_power(name, "On") == "On"
        return name

    return take


def attach_bmc(node, emulator, system: str, *, password: str | None = None):
    """Give `node` a BMC record pointing at `system` of `emulator` (through the service)."""
    from fleet.services.bmc_credentials import set_bmc

    return set_bmc(
        node=node,
        redfish_url=emulator.url,
        system_path=emulator.system_path(system),
        username=emulator.username,
        password=password or emulator.password,
        actor="test",
    )
