"""The `upgrade` action on a real node: install the versions a rollout asks for.

A rollout's work item carries `params.versions` ({component: version}). Installing is the
host's package manager's job, and which one (apt, dnf, a vendor's flash tool) is the
operator's choice, so each component's command is a template in the agent's config
(`upgrade_commands` in agent.toml), an argument list in which `{version}` stands for the
version asked. Nothing from the server reaches a shell: the version must match
VERSION_PATTERN (package-version characters, not starting with `-`, so it can never be read as
an option) and is substituted into the arguments, never into the program's name. Components
run one after another in bring-up order (kernel before driver before fabric manager ...),
stopping at the first failure; the agent then re-sends its software inventory, so the
control plane sees what the node runs whatever the outcome.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from .executors import ActionRun, CommandResult, CommandRunner, CommandSequence, SubprocessRunner, result

# Debian/RPM/semver version characters; 1-100 long like the server's versions.
VERSION_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+:~-]{0,99}")
COMPONENT_PATTERN = re.compile(r"[a-z][a-z0-9_]{0,39}")  # the server's component names
PLACEHOLDER = "{version}"
# Bring-up order: a layer's dependencies are upgraded before it. Others follow, by name.
ORDER = (
    "kernel",
    "gpu_driver",
    "fabric_manager",
    "ib_stack",
    "nvidia_peermem",
    "cuda",
    "nccl",
    "container_toolkit",
)


def upgrade_command_errors(commands: Any) -> list[str]:
    """Why the `upgrade_commands` setting is unusable (empty when it is fine)."""
    if not isinstance(commands, Mapping):
        return ['upgrade_commands must be a table: component = ["program", "arg", "...{version}..."]']
    errors = []
    for component, argv in commands.items():
        if not COMPONENT_PATTERN.fullmatch(str(component)):
            errors.append(f"upgrade_commands: {component!r} is not a component name")
        elif not isinstance(argv, Sequence) or isinstance(argv, str) or not argv:
            errors.append(f"upgrade_commands.{component} must be a list of arguments, not a shell string")
        elif not all(isinstance(a, str) and a for a in argv):
            errors.append(f"upgrade_commands.{component}: every argument must be non-empty text")
        elif PLACEHOLDER in argv[0] or not any(PLACEHOLDER in a for a in argv[1:]):
            errors.append(f"upgrade_commands.{component}: {PLACEHOLDER} must appear in an argument after the program")
    return errors


def _ordered(versions: Mapping[str, str]) -> list[str]:
    rank = {c: i for i, c in enumerate(ORDER)}
    return sorted(versions, key=lambda c: (rank.get(c, len(ORDER)), c))


class UpgradeExecutor:
    def __init__(self, commands: Mapping[str, Sequence[str]], runner: CommandRunner | None = None) -> None:
        self.commands = {c: list(argv) for c, argv in commands.items()}
        self.runner = runner or SubprocessRunner()

    def plan(self, versions: Any) -> list[list[str]]:
        """The argument lists to run for `versions`; ValueError says why none can run."""
        if not isinstance(versions, Mapping) or not versions:
            raise ValueError("upgrade needs params.versions {component: version}")
        unknown = sorted(c for c in versions if str(c) not in self.commands)
        if unknown:
            raise ValueError(
                f"this agent has no upgrade command for {', '.join(map(str, unknown))[:200]}; add "
                f"upgrade_commands.<component> to its agent.toml (configured: {', '.join(self.commands) or 'none'})"
            )
        bad = sorted(str(c) for c, v in versions.items() if not (isinstance(v, str) and VERSION_PATTERN.fullmatch(v)))
        if bad:
            raise ValueError(f"refused: the version asked for {', '.join(bad)} is not a package version")
        return [[a.replace(PLACEHOLDER, versions[c]) for a in self.commands[c]] for c in _ordered(versions)]

    def start(self, params: dict[str, Any], now: datetime) -> ActionRun:
        versions = params.get("versions")
        try:
            commands = self.plan(versions)
        except ValueError as exc:
            return _Refused(result("failed", str(exc)))
        return CommandSequence(self.runner, commands, lambda done: _finish(_ordered(versions), versions, done))


class _Refused:
    """An upgrade refused before any command ran."""

    def __init__(self, outcome: dict[str, Any]) -> None:
        self.outcome = outcome

    def poll(self, now: datetime) -> dict[str, Any] | None:
        return self.outcome


def _finish(components: list[str], versions: Mapping[str, str], done: list[CommandResult]) -> dict[str, Any]:
    steps = [
        {
            "component": c,
            "version": versions[c],
            "argv": list(r.argv),
            "returncode": r.returncode,
            "stderr": r.stderr[-2000:],
        }
        for c, r in zip(components, done, strict=False)
    ]
    installed = [f"{s['component']} {s['version']}" for s in steps if s["returncode"] == 0]
    failed = next((s for s in steps if s["returncode"] != 0), None)
    if failed is not None:
        not_run = components[len(steps) :]
        return result(
            "failed",
            f"upgrade of {failed['component']} to {failed['version']} failed: {' '.join(failed['argv'])} exited "
            f"{failed['returncode']}: {failed['stderr'].strip()[-300:]}"
            + (f" (installed first: {', '.join(installed)})" if installed else "")
            + (f"; not attempted: {', '.join(not_run)}" if not_run else ""),
            {"steps": steps},
        )
    return result("succeeded", "installed " + ", ".join(installed), {"steps": steps})
