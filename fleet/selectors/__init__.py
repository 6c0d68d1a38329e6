"""Reads of the fleet, as aggregate queries (no per-node loops)."""

from .bmc import *  # noqa: F403
from .end_of_life import *  # noqa: F403
from .inventory import *  # noqa: F403
from .power import *  # noqa: F403
from .rollouts import *  # noqa: F403
from .software import *  # noqa: F403
