"""The physical fleet: sites, halls, racks and their power, fabrics, node types, nodes, GPUs
and drives, plus each node's event trail.

Cross-object rules (a rack must power and cool what is placed in it; a node and its fabric
sit in one site) live in `clean()`, so the admin, imports and services all enforce them.
"""

from .bmc import *  # noqa: F403
from .end_of_life import *  # noqa: F403
from .facility import *  # noqa: F403
from .nodes import *  # noqa: F403
from .power import *  # noqa: F403
from .rollouts import *  # noqa: F403
from .software import *  # noqa: F403
