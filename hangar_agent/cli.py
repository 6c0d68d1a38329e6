"""`hangar-agent` console script."""

from __future__ import annotations

import argparse
import logging
import random
import signal
import sys
import threading
from datetime import UTC, datetime

from . import __version__
from .access import with_access, with_simulated_access
from .agent import Agent
from .config import AgentConfig, ConfigError, load_config
from .executors import real_executors, simulated_executors
from .hardware.nvml import NvmlBackend, NvmlUnavailable
from .hardware.simulated import SimulatedHardware
from .software import SimulatedStack, SimulatedUpgrade, read_host_stack
from .spool import Spool
from .transport import AgentTransport
from .upgrade import UpgradeExecutor

log = logging.getLogger("hangar_agent")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="hangar-agent", description="Hangar node agent")
    p.add_argument("--config", help="TOML config file (e.g. /etc/hangar/agent.toml); flags override it")
    p.add_argument("--url", help="control plane base URL, e.g. https://hangar.example.com")
    p.add_argument("--token", help="this node's agent token")
    p.add_argument("--token-file", dest="token_file", help="file holding the token (rewritten after a handoff)")
    p.add_argument(
        "--handoff-file",
        dest="handoff_file",
        help="where the provisioning image puts the one-time identity handoff (claimed when the token is refused)",
    )
    p.add_argument("--backend", choices=("nvml", "simulated"))
    p.add_argument("--spool", dest="spool_path", help="SQLite spool file")
    p.add_argument("--meter-interval", type=float, help="seconds per meter event (default 60)")
    p.add_argument("--heartbeat-interval", type=float, help="seconds between heartbeats (default 10)")
    p.add_argument("--sku", help="instance-type name for meter events when desired-state has none")
    p.add_argument("--speed", type=float, help="simulated backend: time acceleration")
    p.add_argument("--seed", type=int, help="simulated backend: random seed")
    p.add_argument("--scenario", help="simulated backend: scripted faults, e.g. 'xid 79 on gpu 3 at 30s'")
    p.add_argument("--once", action="store_true", help="run one tick and exit")
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--version", action="version", version=f"hangar-agent {__version__}")
    return p


def build_agent(config: AgentConfig) -> Agent:
    """Wire a real agent from its config; raises NvmlUnavailable without GPUs on the nvml backend."""
    rng = random.Random(config.seed)
    transport = AgentTransport(
        config.url,
        config.token,
        timeout=(config.connect_timeout, config.read_timeout),
        max_attempts=config.max_attempts,
        backoff_base=config.backoff_base,
        backoff_cap=config.backoff_cap,
        rng=rng,
    )
    if config.backend == "nvml":
        hardware = NvmlBackend()
        # provision and sync_access deliver the tenant's access (keys, mounts), checked against
        # the image the node runs; stop and wipe take it away again
        executors = with_access(real_executors(), stack=read_host_stack)
        executors["upgrade"] = UpgradeExecutor(config.upgrade_commands)
        software = read_host_stack
    else:
        hardware = SimulatedHardware(
            rng=random.Random(rng.getrandbits(64)),
            generation=config.generation,
            gpu_count=config.gpu_count,
            speed=config.speed,
            scenario=config.scenario or None,
        )
        executors = simulated_executors(hardware, random.Random(rng.getrandbits(64)))
        stack = SimulatedStack(random.Random(rng.getrandbits(64)), config.generation)
        executors["upgrade"] = SimulatedUpgrade(stack, random.Random(rng.getrandbits(64)), hardware.wall)
        executors = with_simulated_access(executors, hardware, stack, random.Random(rng.getrandbits(64)))
        software = stack.components
    return Agent(
        config=config,
        transport=transport,
        hardware=hardware,
        executors=executors,
        spool=Spool(config.spool_path),
        rng=rng,
        software=software,
    )


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr, level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    overrides = {
        k: getattr(args, k)
        for k in (
            "url",
            "token",
            "token_file",
            "handoff_file",
            "backend",
            "spool_path",
            "meter_interval",
            "heartbeat_interval",
            "sku",
            "speed",
            "seed",
            "scenario",
        )
    }
    try:
        config = load_config(args.config, **overrides)
        agent = build_agent(config)
    except (ConfigError, ValueError) as exc:
        print(f"hangar-agent: {exc}", file=sys.stderr)
        return 2
    except NvmlUnavailable as exc:
        print(f"hangar-agent: {exc}", file=sys.stderr)
        return 3
    if args.once:
        agent.tick(datetime.now(UTC))
        return 0
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log.info("hangar-agent %s started (backend %s, url %s)", __version__, config.backend, config.url)
    agent.run_forever(stop)
    return 0


if __name__ == "__main__":
    sys.exit(main())
