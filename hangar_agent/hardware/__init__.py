"""Hardware backends: where GPU telemetry comes from (NVML, nvidia-smi XML, or a simulation)."""

from .base import GPU_FIELDS, HardwareBackend, blank_gpu

__all__ = ["GPU_FIELDS", "HardwareBackend", "blank_gpu", "make_backend"]


def make_backend(name: str, **kwargs: object) -> HardwareBackend:
    """Build a backend by name; imports lazily so a node without NVML can still run simulated."""
    if name == "nvml":
        from .nvml import NvmlBackend

        return NvmlBackend(**kwargs)  # type: ignore[arg-type]
    if name == "simulated":
        from .simulated import SimulatedHardware

        return SimulatedHardware(**kwargs)  # type: ignore[arg-type]
    raise ValueError(f"unknown hardware backend {name!r}")
