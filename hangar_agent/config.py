"""Agent settings: defaults, a TOML file (e.g. /etc/hangar/agent.toml), then CLI overrides."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .upgrade import upgrade_command_errors

BACKENDS = ("nvml", "simulated")


class ConfigError(ValueError):
    """A setting is missing or invalid; the message names it."""


@dataclass(frozen=True)
class AgentConfig:
    """Everything the agent needs; intervals and timeouts are in seconds."""

    url: str = ""
    token: str = ""
    # Where the agent keeps its token: read at start when `token` is not given, rewritten when the
    # node receives a new identity through the handoff (docs/agent.md, "Identity per tenancy").
    token_file: str = ""
    # Where the provisioning image places the one-time identity handoff ({"node_id", "code"}) the
    # control plane published when the node's wipe began; empty: this agent never claims one.
    handoff_file: str = ""
    backend: str = "nvml"
    spool_path: str = "/var/lib/hangar-agent/spool.sqlite3"
    heartbeat_interval: float = 10.0
    meter_interval: float = 60.0
    health_report_interval: float = 300.0
    # the stack changes on upgrades only; it is also re-sent right after an upgrade action
    software_inventory_interval: float = 900.0
    desired_state_interval: float = 10.0
    connect_timeout: float = 3.05
    read_timeout: float = 10.0
    max_attempts: int = 3
    backoff_base: float = 0.5
    backoff_cap: float = 60.0
    # The `upgrade` action's command per component, an argument list with {version}, e.g.
    # gpu_driver = ["apt-get", "install", "-y", "--allow-downgrades", "nvidia-driver-{version}"]
    upgrade_commands: dict[str, list[str]] = field(default_factory=dict)
    # Instance-type name used as the meter events' sku when desired-state carries none.
    sku: str = ""
    # Simulated backend only.
    generation: str = "hopper"
    gpu_count: int = 8
    speed: float = 1.0
    seed: int | None = None
    scenario: str = ""

    def validated(self) -> AgentConfig:
        """Return self if usable, else raise ConfigError naming the bad setting."""
        if not self.url:
            raise ConfigError("url is required (--url or 'url' in the config file)")
        if not self.url.startswith(("http://", "https://")):
            raise ConfigError(f"url must start with http:// or https://, got {self.url!r}")
        if not self.token:
            raise ConfigError("token is required (--token, 'token' or 'token_file' in the config file)")
        if self.backend not in BACKENDS:
            raise ConfigError(f"backend must be one of {', '.join(BACKENDS)}, got {self.backend!r}")
        for name in (
            "heartbeat_interval",
            "meter_interval",
            "health_report_interval",
            "software_inventory_interval",
            "desired_state_interval",
            "connect_timeout",
            "read_timeout",
            "speed",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0")
        errors = upgrade_command_errors(self.upgrade_commands)
        if errors:
            raise ConfigError("; ".join(errors))
        if self.max_attempts < 1:
            raise ConfigError("max_attempts must be >= 1")
        if not 0 < self.backoff_base <= self.backoff_cap:
            raise ConfigError("backoff_base must be > 0 and <= backoff_cap")
        return self


def load_config(path: str | Path | None = None, **overrides: Any) -> AgentConfig:
    """Build a config from an optional TOML file, then apply non-None overrides (CLI flags).

    Unknown keys are refused so a typo in /etc/hangar/agent.toml is not silently ignored.
    """
    known = {f.name for f in fields(AgentConfig)}
    values: dict[str, Any] = {}
    if path is not None:
        try:
            with open(path, "rb") as fh:
                values = tomllib.load(fh)
        except OSError as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from exc
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path} is not valid TOML: {exc}") from exc
    values.update({k: v for k, v in overrides.items() if v is not None})
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown setting(s): {', '.join(unknown)}")
    if not values.get("token") and values.get("token_file"):
        try:
            values["token"] = Path(values["token_file"]).read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read token_file {values['token_file']}: {exc}") from exc
    return replace(AgentConfig(), **values).validated()
