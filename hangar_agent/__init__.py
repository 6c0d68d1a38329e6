"""Hangar node agent: reports telemetry, runs control-plane actions and meters usage.

Deliberately free of Django so it can be installed alone on GPU nodes and driven
in-process by the fleet simulator.
"""

__version__ = "0.1.0"
