"""Hangar settings, read from the environment (django-environ).

Unset variables give the embedded default: SQLite files and Celery's filesystem broker
under var/, so `make demo` needs nothing but Python. Production and CI set DATABASE_URL,
LEDGER_DATABASE_URL and REDIS_URL (PostgreSQL + Redis).
"""

from datetime import timedelta
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(environ.Env().str("HANGAR_VAR_DIR", default=str(BASE_DIR / "var")))
VAR_DIR.mkdir(parents=True, exist_ok=True)

env = environ.Env(
    DEBUG=(bool, False),
    ALLOWED_HOSTS=(list, ["127.0.0.1", "localhost", "testserver", "[::1]"]),
)
environ.Env.read_env(BASE_DIR / ".env", overwrite=False)

DEBUG = env("DEBUG")
# Development keys: fine on a laptop (DEBUG=true, what `make demo` sets), never in production.
# Anyone who knows a key can forge sessions (SECRET_KEY), mint a token for any node
# (AGENT_TOKEN_KEY) or sign metering grants (METERING_GRANT_KEY), so without DEBUG the
# process refuses to start on them.
DEVELOPMENT_SECRET_KEY = "hangar-embedded-default-not-for-production"
DEVELOPMENT_AGENT_TOKEN_KEY = "hangar-embedded-agent-key-not-for-production"
DEVELOPMENT_METERING_GRANT_KEY = "hangar-embedded-metering-grant-key-not-for-production"
# A Fernet key (32 bytes, url-safe base64), not a passphrase: it encrypts BMC credentials at rest.
DEVELOPMENT_BMC_CREDENTIAL_KEY = "b-SjIPSHzNUGmGA2cqXfEa1Zs5C51xQobzcu12wrWE0="
SECRET_KEY = env.str("SECRET_KEY", default="")
# Agent tokens are HMAC-signed with this key so the ledger ingest can verify them without
# reading the control-plane database. Its own secret, never SECRET_KEY: a leaked session key
# must not let anyone speak for a node.
AGENT_TOKEN_KEY = env.str("AGENT_TOKEN_KEY", default="")
# Metering grants (which node may bill which allocation, when) are signed with a key the billing
# ledger holds, so ingest checks them without the control-plane database (docs/billing.md).
METERING_GRANT_KEY = env.str("METERING_GRANT_KEY", default="")
# BMC usernames and passwords are stored encrypted with this Fernet key (comma-separated keys
# rotate: the first encrypts, any decrypts; fleet.services.bmc_credentials). Its own secret,
# never SECRET_KEY: a leaked session key must not open every server's management controller.
BMC_CREDENTIAL_KEY = env.str("BMC_CREDENTIAL_KEY", default="")
if DEBUG:
    SECRET_KEY = SECRET_KEY or DEVELOPMENT_SECRET_KEY
    AGENT_TOKEN_KEY = AGENT_TOKEN_KEY or DEVELOPMENT_AGENT_TOKEN_KEY
    METERING_GRANT_KEY = METERING_GRANT_KEY or DEVELOPMENT_METERING_GRANT_KEY
    BMC_CREDENTIAL_KEY = BMC_CREDENTIAL_KEY or DEVELOPMENT_BMC_CREDENTIAL_KEY
else:
    from config.secrets import require_fernet_keys, require_production_secrets

    require_production_secrets(
        {
            "SECRET_KEY": SECRET_KEY,
            "AGENT_TOKEN_KEY": AGENT_TOKEN_KEY,
            "METERING_GRANT_KEY": METERING_GRANT_KEY,
            "BMC_CREDENTIAL_KEY": BMC_CREDENTIAL_KEY,
        },
        development_keys=(
            DEVELOPMENT_SECRET_KEY,
            DEVELOPMENT_AGENT_TOKEN_KEY,
            DEVELOPMENT_METERING_GRANT_KEY,
            DEVELOPMENT_BMC_CREDENTIAL_KEY,
        ),
    )
    require_fernet_keys("BMC_CREDENTIAL_KEY", BMC_CREDENTIAL_KEY, development_key=DEVELOPMENT_BMC_CREDENTIAL_KEY)
ALLOWED_HOSTS = env("ALLOWED_HOSTS")
CSRF_TRUSTED_ORIGINS = env.list("CSRF_TRUSTED_ORIGINS", default=[])

# --- Transport security: on by default without DEBUG, each one switchable from the environment.
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=not DEBUG)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=not DEBUG)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=not DEBUG)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0 if DEBUG else 31_536_000)  # one year
SECURE_HSTS_INCLUDE_SUBDOMAINS = env.bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", default=not DEBUG)
SECURE_HSTS_PRELOAD = env.bool("SECURE_HSTS_PRELOAD", default=not DEBUG)
# The proxies in front (docs/deployment.md, "Behind a proxy"): NUM_PROXIES is how many set
# X-Forwarded-For in turn (the client address the login limits and API budgets count by is
# that many hops from the right), TRUSTED_PROXIES the addresses they connect from (CIDR list).
# X-Forwarded-For, -Proto, -Host and Forwarded are dropped from any request that does not come
# from a trusted proxy (core.middleware.ForwardedHeadersMiddleware), so a client reaching the
# web server directly cannot claim HTTPS or another address. Both are set, or neither.
NUM_PROXIES = env.int("NUM_PROXIES", default=0)
from core.netguard import parse_networks as _parse_networks  # noqa: E402  (pure function)

try:
    TRUSTED_PROXIES = tuple(
        n.network for n in _parse_networks(env.str("TRUSTED_PROXIES", default=""), setting="TRUSTED_PROXIES")
    )
except ValueError as _bad_proxy:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(str(_bad_proxy)) from None
if bool(NUM_PROXIES) != bool(TRUSTED_PROXIES) or NUM_PROXIES < 0:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "Set NUM_PROXIES (how many proxies set X-Forwarded-For) and TRUSTED_PROXIES (the addresses they connect "
        "from) together, or neither: behind a proxy with NUM_PROXIES=0 every client shares the proxy's address "
        "(one client's wrong passwords lock everyone out), and NUM_PROXIES without TRUSTED_PROXIES would let any "
        "client choose its own address."
    )
# Behind a TLS-terminating proxy Django sees plain HTTP; it trusts this header from the trusted
# proxies only (above). "HTTP_X_FORWARDED_PROTO,https" by default when there is a proxy.
_proxy_ssl_header = env.str("SECURE_PROXY_SSL_HEADER", default="HTTP_X_FORWARDED_PROTO,https" if NUM_PROXIES else "")
SECURE_PROXY_SSL_HEADER = tuple(_proxy_ssl_header.split(",", 1)) if _proxy_ssl_header else None
# Sessions: signed in for at most SESSION_MAX_HOURS, and signed out after SESSION_IDLE_MINUTES
# without a page visit (core.middleware.IdleSessionMiddleware; a dashboard's background
# refreshes do not count as a visit).
SESSION_COOKIE_AGE = env.int("SESSION_MAX_HOURS", default=12) * 3600
SESSION_IDLE_SECONDS = env.int("SESSION_IDLE_MINUTES", default=30) * 60
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SAMESITE = "Lax"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "django_filters",
    "django_celery_beat",
    "axes",
    "core",
    "fleet",
    "tenants",
    "health",
    "billing",
    "planning",
]
# Demo seeding, `manage.py demo`, seed_fleet and the fleet simulator. The product never imports
# them; a production deployment sets HANGAR_DEVTOOLS=false and the app is not installed.
if env.bool("HANGAR_DEVTOOLS", default=True):
    INSTALLED_APPS.append("devtools")

MIDDLEWARE = [
    "core.middleware.ForwardedHeadersMiddleware",  # first: nothing may read a header a client forged
    "core.middleware.RequestIdMiddleware",
    "core.middleware.RequestBodyLimitMiddleware",
    "core.middleware.RejectNulCharactersMiddleware",
    "core.middleware.RequestLatencyMiddleware",
    "core.middleware.OutageMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "core.middleware.IdleSessionMiddleware",
    "core.middleware.SecurityHeadersMiddleware",  # CSP with a per-request nonce; no-store when signed in
    "core.middleware.LoginInputMiddleware",
    "core.middleware.MessageMiddleware",  # Django's, skipped on the node-agent API
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last, as django-axes asks: it turns a locked-out login into its 429 page.
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "config.urls"
APPEND_SLASH = False  # every API path answers with and without its trailing slash (docs/api.md)

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            # The display filters (money, gpu_hours, kw, percent, age…) on every template.
            "builtins": ["core.templatetags.formatting"],
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "config.wsgi.application"


def _database(var: str, sqlite_name: str) -> dict:
    config = env.db(var, default=f"sqlite:///{VAR_DIR / sqlite_name}")
    if config["ENGINE"] == "django.db.backends.sqlite3":
        # WAL + IMMEDIATE transactions let web, worker and simulator share one file
        # without "database is locked" on every concurrent write.
        config["OPTIONS"] = {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    else:
        config.setdefault("CONN_MAX_AGE", 60)
        config.setdefault("CONN_HEALTH_CHECKS", True)
        if config["ENGINE"] == "django.db.backends.postgresql":
            config["ENGINE"] = "core.db.postgresql"  # health-checks only a connection left idle
    return config


DATABASES = {
    "default": _database("DATABASE_URL", "hangar.sqlite3"),
    "ledger": _database("LEDGER_DATABASE_URL", "ledger.sqlite3"),
}
DATABASE_ROUTERS = ["config.db_router.LedgerRouter"]
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

# django-axes first: it refuses a locked-out (username, address) before the password is checked.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend"]
# Two limits at once (core.login_limits): five wrong passwords for one account from one address
# lock that pair out for 15 minutes (429 with Retry-After), and twenty from one address, whatever
# the usernames, lock the address (password spraying). Locking the pair, not the account alone,
# keeps an attacker from locking operators out by guessing their usernames; the address limit
# is higher so one person's typos never lock out everyone behind a shared address. A success
# resets. Successes, failures and lockouts go into the audit trail (core.services.login_audit).
LOGIN_FAILURE_LIMIT = env.int("LOGIN_FAILURE_LIMIT", default=5)
LOGIN_ADDRESS_FAILURE_LIMIT = env.int("LOGIN_ADDRESS_FAILURE_LIMIT", default=20)
AXES_HANDLER = "core.login_limits.PairAndAddressHandler"
AXES_FAILURE_LIMIT = LOGIN_ADDRESS_FAILURE_LIMIT
AXES_COOLOFF_TIME = timedelta(minutes=env.int("LOGIN_LOCKOUT_MINUTES", default=15))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"], "ip_address"]
AXES_LOCKOUT_CALLABLE = "core.login_limits.locked_out"
AXES_RESET_ON_SUCCESS = True
AXES_CLIENT_IP_CALLABLE = "core.api.throttles.client_address"  # the same address the API throttles use
AXES_VERBOSE = False
# Longer than any account name (150): refused with 400 before anything looks it up.
LOGIN_MAX_USERNAME_LENGTH = 150

# Django's validators: not like the user's name or e-mail, at least 12 characters, not one of
# the 20,000 most common passwords, not all digits.
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator", "OPTIONS": {"min_length": 12}},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "/accounts/login/"
LOGIN_REDIRECT_URL = "/"
LOGOUT_REDIRECT_URL = "/accounts/login/"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = VAR_DIR / "staticfiles"

# --- Celery -----------------------------------------------------------------------------
REDIS_URL = env.str("REDIS_URL", default="")
_filesystem_broker_dir = VAR_DIR / "celery-broker"
CELERY_BROKER_URL = env.str("CELERY_BROKER_URL", default=REDIS_URL or "filesystem://")
if CELERY_BROKER_URL.startswith("filesystem://"):
    for sub in ("queue", "processed"):
        (_filesystem_broker_dir / sub).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "data_folder_in": str(_filesystem_broker_dir / "queue"),
        "data_folder_out": str(_filesystem_broker_dir / "queue"),
        "processed_folder": str(_filesystem_broker_dir / "processed"),
        "store_processed": False,
    }
CELERY_TASK_IGNORE_RESULT = True
# Late acknowledgement: a task is acked when it finishes, so a worker killed mid-task leaves the
# message to be delivered again. A worker child that dies is requeued at once (reject on worker
# lost); a whole worker killed with -9 leaves the message unacked in Redis until the visibility
# timeout, sized just above the longest task time limit (billing, 360 s) so a running task is
# never delivered twice and a killed one is re-run within ~8 minutes. Every task is idempotent
# (advisory locks, level-triggered loops), so a second delivery cannot do the work twice.
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_LONGEST_TASK_TIME_LIMIT_S = 360
CELERY_VISIBILITY_TIMEOUT_S = env.int("CELERY_VISIBILITY_TIMEOUT_S", default=CELERY_LONGEST_TASK_TIME_LIMIT_S + 120)
if not CELERY_BROKER_URL.startswith("filesystem://"):
    CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": CELERY_VISIBILITY_TIMEOUT_S}
CELERY_TASK_SOFT_TIME_LIMIT = 50
CELERY_TASK_TIME_LIMIT = 60
CELERY_BEAT_SCHEDULER = "core.beat:SingleBeatScheduler"  # DatabaseScheduler behind the single-beat lease
CELERY_TIMEZONE = "UTC"
CELERY_TASK_ALWAYS_EAGER = env.bool("CELERY_TASK_ALWAYS_EAGER", default=False)

# --- API --------------------------------------------------------------------------------
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["core.api.authentication.BearerTokenAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_PARSER_CLASSES": ["core.api.parsers.JSONParser"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.api.problems.problem_exception_handler",
    "DEFAULT_THROTTLE_CLASSES": ["core.api.throttles.TokenKindThrottle"],
    # How many proxies in front set X-Forwarded-For (above); 0 trusts only the socket's address,
    # so a client cannot dodge its budget by sending a made-up header.
    "NUM_PROXIES": NUM_PROXIES,
    "DEFAULT_PAGINATION_CLASS": None,
    "UNAUTHENTICATED_USER": None,
}
SPECTACULAR_SETTINGS = {
    "TITLE": "Hangar API",
    "DESCRIPTION": "Tenant, operator and node-agent API of the Hangar GPU cloud control plane.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["rest_framework.permissions.AllowAny"],
    "SERVE_AUTHENTICATION": [],
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI assets come from drf-spectacular-sidecar so /api/v1/docs works offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "core.api.schema.tag_operations_by_area",  # Swagger groups: tenant, billing, ops, planning, agent
        "core.api.schema.strip_trailing_slashes",
    ],
}

# --- BMCs (Redfish, fleet.services.bmc) ----------------------------------------------------
# A BMC that does not answer a TCP connect in a few seconds is down; reads may be slower (some
# BMCs take seconds to assemble a system resource). Retries back off 0.5 s, 1 s, 2 s...
BMC_CONNECT_TIMEOUT_S = env.float("BMC_CONNECT_TIMEOUT_S", default=3.0)
BMC_READ_TIMEOUT_S = env.float("BMC_READ_TIMEOUT_S", default=15.0)
BMC_RETRIES = env.int("BMC_RETRIES", default=2)
BMC_RETRY_BACKOFF_S = env.float("BMC_RETRY_BACKOFF_S", default=0.5)
# The power sync loop's bound on concurrent BMC requests, and how long a pass may run.
BMC_SYNC_CONCURRENCY = env.int("BMC_SYNC_CONCURRENCY", default=32)
BMC_SYNC_BUDGET_S = env.int("BMC_SYNC_BUDGET_S", default=45)
# Chassis power reads per pass for nodes whose agent reports no fresh power (4-5 GETs each).
BMC_POWER_READS_PER_PASS = env.int("BMC_POWER_READS_PER_PASS", default=128)
# Verify the BMC's TLS certificate (a CA bundle path, or false for self-signed lab BMCs). A BMC
# record may instead carry its own CA or a pinned certificate (docs/bmc.md, "Network policy").
BMC_VERIFY_TLS = env.str("BMC_VERIFY_TLS", default="true")
# The management networks BMCs live in (core.netguard): every BMC address entered anywhere
# (enrolment, admin, API, import) and every connection to one must fall inside one of these
# CIDR blocks; `+http` after a block allows plain HTTP there (equipment without TLS), e.g.
# "10.64.0.0/16, 10.65.0.0/24+http". Loopback, link-local and the control plane's own addresses
# are refused whatever this says. Empty (the default without DEBUG): no BMC can be reached.
from core.netguard import parse_networks, parse_origins  # noqa: E402  (pure functions, no Django settings needed)

try:
    BMC_NETWORKS = parse_networks(
        env.str("BMC_NETWORKS", default="10.0.0.0/8" if DEBUG else ""), setting="BMC_NETWORKS"
    )
    # The control plane's own addresses beyond this machine's (a load balancer's, a NAT's).
    CONTROL_PLANE_NETWORKS = tuple(
        n.network
        for n in parse_networks(env.str("CONTROL_PLANE_NETWORKS", default=""), setting="CONTROL_PLANE_NETWORKS")
    )
except ValueError as _bad_network:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(str(_bad_network)) from None
# Development only: exact origins (scheme://host:port) of BMC emulators on this machine, exempt
# from the network policy. `make demo`'s emulator is on 127.0.0.1:8001. Refused without DEBUG.
BMC_LAB_ORIGINS = parse_origins(env.str("BMC_LAB_ORIGINS", default="http://127.0.0.1:8001" if DEBUG else ""))
if BMC_LAB_ORIGINS and not DEBUG:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "Refusing to start with DEBUG off: BMC_LAB_ORIGINS exempts addresses from the BMC network policy and is for "
        "a development emulator only; unset it and list the management networks in BMC_NETWORKS."
    )

# --- Notifications: the outbox, operator paging, tenant webhooks (docs/notifications.md) -------
# A delivery is retried with exponential backoff (base, 2x, 4x ... at most the cap) and
# dead-lettered after NOTIFY_MAX_ATTEMPTS failed attempts.
NOTIFY_MAX_ATTEMPTS = env.int("NOTIFY_MAX_ATTEMPTS", default=5)
NOTIFY_BACKOFF_BASE_S = env.int("NOTIFY_BACKOFF_BASE_S", default=30)
NOTIFY_BACKOFF_CAP_S = env.int("NOTIFY_BACKOFF_CAP_S", default=3600)
NOTIFY_HTTP_TIMEOUT_S = env.float("NOTIFY_HTTP_TIMEOUT_S", default=10.0)
# Retention: an event whose deliveries all went out (replays included) is purged this many days
# after its last delivery; one with a dead-lettered delivery is kept until an operator retries it
# or it is NOTIFY_DEAD_RETENTION_DAYS old (core.outbox.purge_expired, hourly, in batches). A dedup
# key is remembered as long as its event is kept.
NOTIFY_RETENTION_DAYS = env.int("NOTIFY_RETENTION_DAYS", default=30)
NOTIFY_DEAD_RETENTION_DAYS = env.int("NOTIFY_DEAD_RETENTION_DAYS", default=90)
if not 1 <= NOTIFY_RETENTION_DAYS <= 3650 or not NOTIFY_RETENTION_DAYS <= NOTIFY_DEAD_RETENTION_DAYS <= 3650:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "NOTIFY_RETENTION_DAYS must lie in 1..3650 and NOTIFY_DEAD_RETENTION_DAYS between it and 3650 "
        f"(got {NOTIFY_RETENTION_DAYS} and {NOTIFY_DEAD_RETENTION_DAYS})."
    )
# PagerDuty V3 webhook subscriptions' signing secrets (comma-separated: two during a rotation).
# Empty: the inbound endpoint /api/v1/hooks/pagerduty refuses everything (docs/notifications.md).
PAGERDUTY_WEBHOOK_SECRETS = tuple(s for s in env.list("PAGERDUTY_WEBHOOK_SECRETS", default=[]) if s)
# Webhook receivers (paging webhooks, PagerDuty's URL, tenants' endpoints) must be globally
# routable, over HTTPS; private ranges an operator lists here are allowed too (`+http` for plain
# HTTP). Loopback, link-local and the control plane's own addresses stay refused.
try:
    NOTIFY_ALLOWED_NETWORKS = parse_networks(
        env.str("NOTIFY_ALLOWED_NETWORKS", default=""), setting="NOTIFY_ALLOWED_NETWORKS"
    )
except ValueError as _bad_network:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(str(_bad_network)) from None
# Development only: exact origins exempt from the guard (the demo's notification sink). Refused without DEBUG.
NOTIFY_LAB_ORIGINS = parse_origins(env.str("NOTIFY_LAB_ORIGINS", default="http://127.0.0.1:8002" if DEBUG else ""))
if NOTIFY_LAB_ORIGINS and not DEBUG:
    from django.core.exceptions import ImproperlyConfigured

    raise ImproperlyConfigured(
        "Refusing to start with DEBUG off: NOTIFY_LAB_ORIGINS is for development receivers only."
    )
# Signed webhooks: a receiver refuses a signature older than this (docs/api.md, "Webhooks").
NOTIFY_SIGNATURE_TOLERANCE_S = 300
# E-mail goes through Django's SMTP backend (EMAIL_HOST, EMAIL_PORT, EMAIL_HOST_USER,
# EMAIL_HOST_PASSWORD, EMAIL_USE_TLS); the demo writes e-mails to its log instead.
NOTIFY_EMAIL_BACKEND = env.str(
    "NOTIFY_EMAIL_BACKEND",
    default="django.core.mail.backends.console.EmailBackend"
    if DEBUG
    else "django.core.mail.backends.smtp.EmailBackend",
)
EMAIL_HOST = env.str("EMAIL_HOST", default="localhost")
EMAIL_PORT = env.int("EMAIL_PORT", default=25)
EMAIL_HOST_USER = env.str("EMAIL_HOST_USER", default="")
EMAIL_HOST_PASSWORD = env.str("EMAIL_HOST_PASSWORD", default="")
EMAIL_USE_TLS = env.bool("EMAIL_USE_TLS", default=False)
EMAIL_TIMEOUT = 10
DEFAULT_FROM_EMAIL = env.str("DEFAULT_FROM_EMAIL", default="hangar@localhost")
# The console's address in links sent out (a page links to its incident).
PUBLIC_URL = env.str("PUBLIC_URL", default="http://127.0.0.1:8000")

# --- Correlated fabric failures (health.services.fabric, docs/faults.md) --------------------------
# Defaults are health.policy's FABRIC_* constants (the lapse rules': leaf as leaf, domain as site).
# A leaf (or domain) is one incident when at least MIN_NODES of its nodes, and at least SHARE of
# its judged nodes, lost their link within WINDOW_S seconds. Under 2 nodes every lost cable would
# be an "incident"; a share above 1 or a window over an hour would hide real switch failures.
from config.bounds import bounded_number  # noqa: E402  (pure function, no Django settings needed)

HEALTH_FABRIC_LEAF_MIN_NODES = bounded_number(env, "HEALTH_FABRIC_LEAF_MIN_NODES", default=3, low=2, high=1000)
HEALTH_FABRIC_LEAF_SHARE = bounded_number(env, "HEALTH_FABRIC_LEAF_SHARE", default=0.5, low=0.05, high=1.0, kind=float)
HEALTH_FABRIC_DOMAIN_MIN_NODES = bounded_number(env, "HEALTH_FABRIC_DOMAIN_MIN_NODES", default=3, low=2, high=100_000)
HEALTH_FABRIC_DOMAIN_SHARE = bounded_number(
    env, "HEALTH_FABRIC_DOMAIN_SHARE", default=0.55, low=0.05, high=1.0, kind=float
)
HEALTH_FABRIC_WINDOW_S = bounded_number(env, "HEALTH_FABRIC_WINDOW_S", default=330, low=30, high=3600)

# Fault points for the fault suite only (core.faults); empty in every real deployment.
from core.faults import parse_fault_points  # noqa: E402  (pure function, no Django needed)

FAULT_POINTS = parse_fault_points(env.str("HANGAR_FAULT_POINTS", default=""))

# Seconds a client is told to wait when the database or broker is unavailable (core.outages).
OUTAGE_RETRY_AFTER_S = env.int("OUTAGE_RETRY_AFTER_S", default=5)
# Largest request body (bytes), 413 above it. The biggest legitimate body is a disposition plan
# naming up to 200,000 node ids (~7.6 MB); a full meter batch of 1,000 events is under 1 MB.
DATA_UPLOAD_MAX_MEMORY_SIZE = env.int("MAX_REQUEST_BODY_BYTES", default=8 * 1024 * 1024)
# JSON nested deeper than this is a 400: no API body needs more than a few levels, and deep
# nesting is how a small body exhausts the parser's stack.
API_MAX_JSON_DEPTH = 32

# Requests per caller (core.api.throttles): a tenant's tokens together, an operator user, a
# node agent (heartbeat and desired-state every 10 s, meters every 60 s: ~15/min, with room
# for a spool flushing its backlog after an outage), anything without a valid token per
# client address, and failed token checks per address.
API_THROTTLE_RATES = {
    "tenant": env.str("THROTTLE_TENANT", default="1200/min"),
    "operator": env.str("THROTTLE_OPERATOR", default="1200/min"),
    "agent": env.str("THROTTLE_AGENT", default="600/min"),
    "anonymous": env.str("THROTTLE_ANONYMOUS", default="120/min"),
    "failed_auth": env.str("THROTTLE_FAILED_AUTH", default="30/min"),
}
# Shared by every web process when Redis is there (throttle counts, login lockout cache).
CACHES = (
    {
        "default": {
            "BACKEND": "core.cache.ReusingRedisCache",
            "LOCATION": REDIS_URL,
            "KEY_PREFIX": "hangar",
        }
    }
    if REDIS_URL
    else {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
)

# New tenant and operator API tokens expire this many days after issue unless the issuer picks
# another time (0: new tokens do not expire unless the issuer says so).
API_TOKEN_LIFETIME_DAYS = env.int("API_TOKEN_LIFETIME_DAYS", default=90)

PAGE_SIZE_DEFAULT = 50
PAGE_SIZE_MAX = 200
IDEMPOTENCY_KEY_TTL_DAYS = 7

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env.str("LOG_LEVEL", default="INFO")},
    "loggers": {
        "django.db.backends": {"level": "WARNING"},
        # runserver's per-request lines; `make demo` sets WARNING so its banner stays readable
        "django.server": {"level": env.str("ACCESS_LOG_LEVEL", default="INFO")},
    },
}

# --- Billing ----------------------------------------------------------------------------
BILLING_ISSUER = env.str("BILLING_ISSUER", default="hangar")  # invoice numbers are gapless per issuer
# Who issues the invoices (printed under "From" on invoices and credit notes).
BILLING_SELLER_NAME = env.str("BILLING_SELLER_NAME", default="Hangar GPU Cloud (development seller)")
BILLING_SELLER_ADDRESS = env.str("BILLING_SELLER_ADDRESS", default="")  # lines separated by "|"
BILLING_SELLER_TAX_ID = env.str("BILLING_SELLER_TAX_ID", default="")
# A past month is finalized this many hours after it ends, so late meter events still land on it.
BILLING_FINALIZE_GRACE_HOURS = env.int("BILLING_FINALIZE_GRACE_HOURS", default=6)
# SLA credit = provider-attributed GPU-hours × the SKU's price × this factor (README "Billing").
BILLING_SLA_CREDIT_FACTOR = env.str("BILLING_SLA_CREDIT_FACTOR", default="1")
# Metering grants last this long ahead of "now" and are renewed on every desired-state poll.
METERING_GRANT_HOURS = env.int("METERING_GRANT_HOURS", default=4)
# Ingest accepts events ending at most this far ahead of its clock (agent clock skew) ...
METER_CLOCK_SKEW_SECONDS = env.int("METER_CLOCK_SKEW_SECONDS", default=300)
# ... and at most this old (an agent spools through outages; older is refused, kept, shown).
METER_MAX_EVENT_AGE_HOURS = env.int("METER_MAX_EVENT_AGE_HOURS", default=7 * 24)
# Refused meter events kept as rows per node and hour; past it they are only counted (a rented
# node's token must not be able to fill the ledger's disk with refusals; billing.RejectedMeterTally).
METER_REJECTED_SAMPLE_PER_NODE_HOUR = env.int("METER_REJECTED_SAMPLE_PER_NODE_HOUR", default=200)
# The ledger's monthly partitions (PostgreSQL): how many months ahead the beat task makes them,
# and how long after a month stops accepting usage it may be archived (docs/billing.md).
LEDGER_PARTITIONS_AHEAD = env.int("LEDGER_PARTITIONS_AHEAD", default=3)
LEDGER_ARCHIVE_GRACE_DAYS = env.int("LEDGER_ARCHIVE_GRACE_DAYS", default=7)
# Usage this far outside the node's allocation membership is held as disputed (an agent learns
# of a release at its next desired-state poll, so the last interval may overhang a little).
BILLING_DISPUTE_TOLERANCE_SECONDS = env.int("BILLING_DISPUTE_TOLERANCE_SECONDS", default=300)
# How long an agent request trusts the cached revocation entry of its node. With the shared
# (Redis) cache a revocation replaces the entry at once, so the lifetime only bounds a missed
# write; it is longer than the 10 s heartbeat interval, else every heartbeat missed the cache
# and paid a SELECT and two writes (docs/PERFORMANCE.md). A per-process cache keeps 10 s.
AGENT_REVOCATION_CACHE_SECONDS = env.int("AGENT_REVOCATION_CACHE_SECONDS", default=120 if REDIS_URL else 10)
# Identity per tenancy (core.services.agent_credentials): when a node's wipe begins, its agent
# token is revoked and the next identity waits as a one-time handoff. The handoff's code is
# published as one file per node in this directory, which the deployment's network-boot
# service serves only to that node's wipe image on the provisioning network (docs/security.md,
# "A tenant with root"); nothing else should be able to read it. A code not claimed within the
# TTL expires (the node then needs `manage.py create_token --agent HOSTNAME`).
AGENT_HANDOFF_DIR = env.str("AGENT_HANDOFF_DIR", default=str(VAR_DIR / "agent-handoff"))
AGENT_HANDOFF_TTL_SECONDS = env.int("AGENT_HANDOFF_TTL_SECONDS", default=2 * 3600)
