from tests.redfish import emulated_system, redfish_emulator, refusing_emulator  # noqa: F401 (fixtures)
