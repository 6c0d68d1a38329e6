"""Settings of the test suite: the real settings (DEBUG off, so the suite runs what production
runs) with test-only secrets and plain-HTTP transport, since the test client and the browser
tests' live server speak HTTP. Set through the environment so processes a test starts with
`config.settings` inherit the same values."""

import os

TEST_ENVIRONMENT = {
    "SECRET_KEY": "hangar-test-suite-session-key-0123456789abcdef",
    "AGENT_TOKEN_KEY": "hangar-test-suite-agent-key-0123456789abcdef",
    "METERING_GRANT_KEY": "hangar-test-suite-metering-grant-key-0123456789",
    "BMC_CREDENTIAL_KEY": "dtYR9B3VH2kmlmuAgDZ5iWE9LUW6MHybCKyuFsFdMho=",
    "SECURE_SSL_REDIRECT": "false",
    "SESSION_COOKIE_SECURE": "false",
    "CSRF_COOKIE_SECURE": "false",
}
for _name, _value in TEST_ENVIRONMENT.items():
    os.environ.setdefault(_name, _value)

from config.settings import *  # noqa: E402,F403

# Budgets no ordinary test (nor the schema fuzzers' thousands of calls) reaches; the throttle
# tests set their own small ones.
API_THROTTLE_RATES = {scope: "1000000/min" for scope in API_THROTTLE_RATES}  # noqa: F405
# Sign-in tests post many passwords; the production hasher's cost is not what they test.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
# Identity handoffs the tests publish go to a directory of this run, not the checkout's var/.
import tempfile  # noqa: E402

AGENT_HANDOFF_DIR = tempfile.mkdtemp(prefix="hangar-test-handoff-")

# BMCs in the tests: the documentation ranges and 10/8 are "management networks" (10.200/16 also
# over plain HTTP); the session's Redfish emulators on 127.0.0.1 are lab origins, added by the
# fixtures that start them (tests/redfish.py).
from core.netguard import parse_networks  # noqa: E402

BMC_NETWORKS = parse_networks("10.0.0.0/8, 10.200.0.0/16+http, 192.0.2.0/24, 2001:db8::/32", setting="BMC_NETWORKS")
BMC_LAB_ORIGINS = set()

# SQLite test databases are files (in a directory of this run), not in memory: the suite copies
# the migrated database once to seed the shared fleet (tests/session_fleet.py), and live-server
# threads open their own connections to a file without sharing one in-memory connection.
import atexit  # noqa: E402
import shutil  # noqa: E402

_test_db_dir = tempfile.mkdtemp(prefix="hangar-test-db-")
atexit.register(shutil.rmtree, _test_db_dir, ignore_errors=True)
for _alias, _database in DATABASES.items():  # noqa: F405
    if _database["ENGINE"] == "django.db.backends.sqlite3":
        _database.setdefault("TEST", {})["NAME"] = os.path.join(_test_db_dir, f"test_{_alias}.sqlite3")
# xdist workers share one Redis: each keeps its own keys.
if "KEY_PREFIX" in CACHES["default"]:  # noqa: F405
    CACHES["default"]["KEY_PREFIX"] += "-" + os.environ.get("PYTEST_XDIST_WORKER", "main")  # noqa: F405
# Files the code keeps at run time under VAR_DIR (SQLite's advisory lock files, staged imports,
# the BMC CA) are per xdist worker: two workers' billing runs are not one run holding a lock.
if os.environ.get("PYTEST_XDIST_WORKER"):
    VAR_DIR = VAR_DIR / "xdist" / os.environ["PYTEST_XDIST_WORKER"]  # noqa: F405
    VAR_DIR.mkdir(parents=True, exist_ok=True)
