"""Fatia settings: one file, read from environment variables.

Demo defaults are safe: with DEBUG off the portal refuses to start unless SECRET_KEY,
DATABASE_URL and CELERY_BROKER_URL are set explicitly (a missing secret never falls back to a
known value in production). Secrets may also come from `<NAME>_FILE` (Kubernetes secret mounts).
"""

from __future__ import annotations

import os
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent


def env_bool(name: str, default: bool) -> bool:
    """Only the literal strings True/False are accepted, so a typo cannot silently flip a flag."""
    raw = os.environ.get(name)
    if raw is None:
        return default
    if raw not in ("True", "False"):
        raise ImproperlyConfigured(f"{name} must be True or False, not {raw!r}")
    return raw == "True"


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        return int(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f"{name} must be an integer, not {raw!r}") from exc


def env_secret(name: str) -> str | None:
    """Read NAME, or the contents of the file named by NAME_FILE."""
    value = os.environ.get(name)
    if value:
        return value
    path = os.environ.get(f"{name}_FILE")
    if path:
        return Path(path).read_text().strip()
    return None


DEBUG = env_bool("DEBUG", False)

_secret = env_secret("SECRET_KEY")
_database_url = env_secret("DATABASE_URL")
_broker_url = env_secret("CELERY_BROKER_URL")
if not DEBUG:
    missing = [
        name
        for name, value in (
            ("SECRET_KEY", _secret),
            ("DATABASE_URL", _database_url),
            ("CELERY_BROKER_URL", _broker_url),
        )
        if not value
    ]
    if missing:
        raise ImproperlyConfigured(
            f"DEBUG is off and {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not set; "
            "refusing to start with demo defaults"
        )

# The demo key only ever exists with DEBUG on (checked above).
SECRET_KEY = _secret or "demo-only-insecure-key-never-used-with-debug-off"
# Django's own rule for a strong key (its security.W009 check): 50 characters or more, 5 different or more, not a
# key Django generated for a development project. A weak key signs sessions and CSRF tokens anyone could forge.
if not DEBUG and (len(SECRET_KEY) < 50 or len(set(SECRET_KEY)) < 5 or SECRET_KEY.startswith("django-insecure-")):
    raise ImproperlyConfigured(
        "DEBUG is off and SECRET_KEY is too weak: use 50 or more random characters, e.g. the output of "
        "`python -c 'import secrets; print(secrets.token_urlsafe(50))'`."
    )

ALLOWED_HOSTS = [h for h in os.environ.get("ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",") if h]
CSRF_TRUSTED_ORIGINS = [o for o in os.environ.get("CSRF_TRUSTED_ORIGINS", "").split(",") if o]
SITE_URL = os.environ.get("SITE_URL", "http://localhost:8000")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "csp",
    "tenants",
    "allocations",
]

MIDDLEWARE = [
    # Probes first: no host check, session or login for /healthz and /readyz (portal/health.py).
    "portal.health.HealthCheckMiddleware",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "tenants.middleware.RejectNulBytesMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "csp.middleware.CSPMiddleware",
]

ROOT_URLCONF = "portal.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "tenants.context_processors.navigation",
            ],
        },
    },
]

WSGI_APPLICATION = "portal.wsgi.application"
ASGI_APPLICATION = "portal.asgi.application"
# Threads per ASGI worker for the synchronous views (portal/asgi.py): how many requests one worker serves at once.
FATIA_ASGI_THREADS = env_int("FATIA_ASGI_THREADS", 2)

DATA_DIR = Path(os.environ.get("FATIA_DATA_DIR", BASE_DIR / "var"))
DATABASES = {
    "default": dj_database_url.parse(
        _database_url or f"sqlite:///{DATA_DIR / 'demo.sqlite3'}",
        conn_max_age=env_int("DATABASE_CONN_MAX_AGE", 60),
        # Health checks cost a `SELECT 1` round trip on the first query of every request (or task); without them a
        # connection broken by a database restart fails one request in each web and worker process (issue 16).
        conn_health_checks=env_bool("DATABASE_CONN_HEALTH_CHECKS", True),
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
]
# Django's model backend, refusing accounts and addresses locked out after failed sign-ins (tenants/signin.py).
AUTHENTICATION_BACKENDS = ["tenants.signin.LockoutModelBackend"]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATICFILES_DIRS = [BASE_DIR / "static"]
STATIC_ROOT = DATA_DIR / "staticfiles"

# Request bodies above this are refused before parsing (HTTP 400 from Django's size check).
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("DATA_UPLOAD_MAX_MEMORY_SIZE", 64 * 1024)

SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env_bool("SESSION_COOKIE_SECURE", not DEBUG)
CSRF_COOKIE_SECURE = env_bool("CSRF_COOKIE_SECURE", not DEBUG)

# HTTPS. Off unless set, because where TLS ends decides them: behind an ingress that terminates TLS, set
# SECURE_PROXY_SSL_HEADER to the header it adds ("X-Forwarded-Proto: https") or the redirect loops for ever.
# `manage.py check --deploy` names any that production still lacks (README, "Running in production").
SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", False)
# Kubernetes probes call the pod over plain HTTP.
SECURE_REDIRECT_EXEMPT = [r"^healthz/?$"]
SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 0)
SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", False)
SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", False)


def proxy_ssl_header(raw: str) -> tuple[str, str] | None:
    """ "X-Forwarded-Proto: https" -> ("HTTP_X_FORWARDED_PROTO", "https"), the form Django wants."""
    if not raw:
        return None
    name, sep, value = raw.partition(":")
    if not sep or not name.strip() or not value.strip():
        raise ImproperlyConfigured(f"SECURE_PROXY_SSL_HEADER must look like 'X-Forwarded-Proto: https', not {raw!r}")
    return "HTTP_" + name.strip().upper().replace("-", "_"), value.strip()


SECURE_PROXY_SSL_HEADER = proxy_ssl_header(os.environ.get("SECURE_PROXY_SSL_HEADER", ""))
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"

# Content-Security-Policy (django-csp). Scripts only from our own static files (no inline code anywhere: pages keep
# their data in json_script blocks); inline style attributes are allowed because the dashboard positions MIG slots
# with them. Swagger UI and ReDoc are served from the installed sidecar package; ReDoc's search runs in a blob: worker.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'", "'unsafe-inline'"],
        "img-src": ["'self'", "data:"],
        "font-src": ["'self'"],
        "connect-src": ["'self'"],
        "worker-src": ["'self'", "blob:"],
        "object-src": ["'none'"],
        "base-uri": ["'self'"],
        "form-action": ["'self'"],
        "frame-ancestors": ["'none'"],
    }
}

# Shared state between processes (API throttles, login lockouts, the dashboard's version cache): Redis in
# production (CACHE_URL, e.g. redis://redis:6379/1); without it each process counts on its own (fine for the demo;
# `manage.py check` warns otherwise, tenants/checks.py).
CACHE_URL = env_secret("CACHE_URL")
CACHES = {
    "default": (
        {"BACKEND": "django.core.cache.backends.redis.RedisCache", "LOCATION": CACHE_URL}
        if CACHE_URL
        else {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}
    )
}

# Throttling (tenants/throttling.py). API: requests per user (all of a user's tokens and sessions together), per
# token, and per client address for anonymous calls; 429 with Retry-After. Sign-in: after this many failures in
# the window, an account (or an address) must wait out the window; the lockout is audited.
FATIA_THROTTLE_ENABLED = env_bool("FATIA_THROTTLE_ENABLED", True)
FATIA_THROTTLE_RATES = {
    "user": os.environ.get("FATIA_THROTTLE_RATE_USER", "1200/min"),
    "token": os.environ.get("FATIA_THROTTLE_RATE_TOKEN", "600/min"),
    "anon": os.environ.get("FATIA_THROTTLE_RATE_ANON", "120/min"),
}
FATIA_LOGIN_FAILURES_PER_ACCOUNT = env_int("FATIA_LOGIN_FAILURES_PER_ACCOUNT", 5)
FATIA_LOGIN_FAILURES_PER_ADDRESS = env_int("FATIA_LOGIN_FAILURES_PER_ADDRESS", 20)
FATIA_LOGIN_LOCKOUT_S = env_int("FATIA_LOGIN_LOCKOUT_S", 900)
# How many reverse proxies (ingress, load balancer) add themselves to X-Forwarded-For in front of the portal;
# 0 trusts only the connection's own address.
FATIA_NUM_PROXIES = env_int("FATIA_NUM_PROXIES", 0)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "tenants.authentication.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "tenants.permissions.TokenScopeAllows",
    ],
    "DEFAULT_FILTER_BACKENDS": [
        "tenants.api.filters.FilterBackend",
        "tenants.api.filters.OrderingFilter",
    ],
    "DEFAULT_PAGINATION_CLASS": "tenants.api.pagination.StandardPagination",
    "DEFAULT_PARSER_CLASSES": [
        "tenants.api.parsers.JSONParser",
        "rest_framework.parsers.FormParser",
        "rest_framework.parsers.MultiPartParser",
    ],
    "DEFAULT_THROTTLE_CLASSES": (
        [
            "tenants.throttling.UserRateThrottle",
            "tenants.throttling.TokenRateThrottle",
            "tenants.throttling.AnonRateThrottle",
        ]
        if FATIA_THROTTLE_ENABLED
        else []
    ),
    "NUM_PROXIES": FATIA_NUM_PROXIES,
    "DEFAULT_SCHEMA_CLASS": "tenants.api.schema.FatiaAutoSchema",
    "EXCEPTION_HANDLER": "tenants.api.exception_handler.handle_api_exception",
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"]
    + (["rest_framework.renderers.BrowsableAPIRenderer"] if DEBUG else []),
    "UNAUTHENTICATED_USER": "django.contrib.auth.models.AnonymousUser",
}

SPECTACULAR_SETTINGS = {
    "TITLE": "Fatia API",
    "DESCRIPTION": "Request, approve and release NVIDIA MIG GPU slices; quotas, pools, tokens and audit.",
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    "SCHEMA_PATH_PREFIX": r"/api/v1",
    # Swagger UI and Redoc are served from the installed sidecar package, not from a CDN.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "AllocationStatusEnum": "allocations.models.Allocation.Status",
        "QuotaChangeStatusEnum": "allocations.models.QuotaChangeRequest.Status",
    },
}

# Celery: JSON only, one reserved task per worker process, late acks (every task is idempotent).
CELERY_BROKER_URL = _broker_url or "memory://"
CELERY_RESULT_BACKEND = None
CELERY_TASK_SERIALIZER = "json"
CELERY_RESULT_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_SOFT_TIME_LIMIT = env_int("CELERY_TASK_SOFT_TIME_LIMIT", 60)
CELERY_TASK_TIME_LIMIT = env_int("CELERY_TASK_TIME_LIMIT", 90)
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
# Redis: a task a dead worker had taken (acks are late) goes back to the queue after this many seconds. It must
# exceed the longest countdown we schedule (30 s retry backoff), or waiting tasks would run twice (harmless:
# every task is idempotent, but wasteful). RabbitMQ redelivers on the closed connection and ignores this.
CELERY_BROKER_TRANSPORT_OPTIONS = {"visibility_timeout": env_int("FATIA_BROKER_VISIBILITY_TIMEOUT_S", 300)}
CELERY_TIMEZONE = "UTC"
# The demo runs tasks in-process right after commit instead of on a worker ("embedded worker").
CELERY_TASK_ALWAYS_EAGER = env_bool("FATIA_EMBEDDED_WORKER", False)

EMAIL_BACKEND = os.environ.get("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
EMAIL_HOST = os.environ.get("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25)
EMAIL_HOST_USER = os.environ.get("EMAIL_HOST_USER", "")
EMAIL_HOST_PASSWORD = env_secret("EMAIL_HOST_PASSWORD") or ""
EMAIL_USE_TLS = env_bool("EMAIL_USE_TLS", False)
DEFAULT_FROM_EMAIL = os.environ.get("DEFAULT_FROM_EMAIL", "fatia@localhost")

# Product policy knobs.
FATIA_MAX_SLICES_PER_REQUEST = env_int("FATIA_MAX_SLICES_PER_REQUEST", 56)
FATIA_LEASE_WARNING_HOURS = env_int("FATIA_LEASE_WARNING_HOURS", 24)
# Which cluster the workers drive: "simulated" (demo and unit tests) or "kubernetes".
FATIA_CLUSTER_BACKEND = os.environ.get("FATIA_CLUSTER_BACKEND", "simulated")
# The Kubernetes backend (allocations/cluster/kube.py): the portal's kubeconfig, call timeouts, where tenants live.
FATIA_KUBECONFIG = os.environ.get("FATIA_KUBECONFIG", "")
FATIA_KUBE_CONNECT_TIMEOUT_S = env_int("FATIA_KUBE_CONNECT_TIMEOUT_S", 3)
FATIA_KUBE_READ_TIMEOUT_S = env_int("FATIA_KUBE_READ_TIMEOUT_S", 10)
# How long after the Kubernetes API was unreachable a 403 of the RBAC shape counts as the restart's tail (retried).
FATIA_KUBE_RESTART_GRACE_S = env_int("FATIA_KUBE_RESTART_GRACE_S", 120)
FATIA_KUBE_NAMESPACE_PREFIX = os.environ.get("FATIA_KUBE_NAMESPACE_PREFIX", "fatia-")
# How long a claim may stay unallocated before the request fails and its quota is given back.
FATIA_KUBE_ALLOCATION_TIMEOUT_S = env_int("FATIA_KUBE_ALLOCATION_TIMEOUT_S", 300)
# The holder pod that makes the scheduler allocate a claim (allocations/cluster/kube.py): its image, fully qualified
# so that a cluster whose runtime has no default registry (or an air-gapped mirror) pulls it; an optional
# PriorityClass (empty: none) so that it is not the first pod evicted under node pressure.
FATIA_HOLDER_IMAGE = os.environ.get("FATIA_HOLDER_IMAGE", "registry.k8s.io/pause:3.10")
FATIA_HOLDER_PRIORITY_CLASS = os.environ.get("FATIA_HOLDER_PRIORITY_CLASS", "")
# The Pod Security level enforced (and audited, and warned about) in tenant namespaces.
FATIA_TENANT_POD_SECURITY = os.environ.get("FATIA_TENANT_POD_SECURITY", "restricted")
if FATIA_TENANT_POD_SECURITY not in ("privileged", "baseline", "restricted"):
    raise ImproperlyConfigured(
        "FATIA_TENANT_POD_SECURITY must be 'privileged', 'baseline' or 'restricted', "
        f"not {FATIA_TENANT_POD_SECURITY!r}."
    )
if not FATIA_HOLDER_IMAGE.strip():
    raise ImproperlyConfigured("FATIA_HOLDER_IMAGE must name an image, e.g. registry.k8s.io/pause:3.10.")
# The holder pods' UID and GID: the pause image's own user by default. Empty: none is set, and the platform picks
# one (OpenShift's restricted-v2 SCC assigns a UID from the namespace's range and refuses any other).
_holder_uid = os.environ.get("FATIA_HOLDER_RUN_AS_USER", "65535").strip()
if _holder_uid and not (_holder_uid.isdigit() and 0 < int(_holder_uid) < 2**31):
    raise ImproperlyConfigured(
        f"FATIA_HOLDER_RUN_AS_USER must be a UID above 0 (or empty: left to the platform), not {_holder_uid!r}."
    )
FATIA_HOLDER_RUN_AS_USER: int | None = int(_holder_uid) if _holder_uid else None
# Fleet discovery (manage.py discover_fleet) lists the cluster again this often, on top of watching it: what a
# watch could have missed is caught then.
FATIA_DISCOVERY_RESYNC_S = env_int("FATIA_DISCOVERY_RESYNC_S", 300)
if FATIA_CLUSTER_BACKEND not in ("simulated", "kubernetes"):
    raise ImproperlyConfigured("FATIA_CLUSTER_BACKEND must be 'simulated' or 'kubernetes'.")
# An empty FATIA_KUBECONFIG in a pod (the kubelet sets KUBERNETES_SERVICE_HOST) means the pod's ServiceAccount
# (allocations/cluster/kube.py api_client); anywhere else it is a mistake.
_in_pod = bool(os.environ.get("KUBERNETES_SERVICE_HOST"))
if FATIA_CLUSTER_BACKEND == "kubernetes" and not FATIA_KUBECONFIG and not _in_pod and not DEBUG:
    raise ImproperlyConfigured(
        "FATIA_CLUSTER_BACKEND is 'kubernetes': set FATIA_KUBECONFIG (or run in a pod, to use its ServiceAccount)."
    )

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": os.environ.get("LOG_LEVEL", "INFO")},
    "loggers": {"django.db.backends": {"level": "WARNING"}},
}

# --- Helm chart (deploy/chart, issue 11) ---------------------------------------------------------------------------
# Where `celery beat` keeps its schedule (last run times). The chart points it at the pod's /tmp, the only writable
# place on a read-only root filesystem; the default is beat's own, in the working directory.
CELERY_BEAT_SCHEDULE_FILENAME = os.environ.get("FATIA_BEAT_SCHEDULE_FILE", "celerybeat-schedule")

# --- Metrics (issue 11: GET /metrics, portal/metrics/) --------------------------------------------------------
# The bearer token Prometheus sends to GET /metrics on the web port (8000); unset, /metrics does not exist (404).
FATIA_METRICS_TOKEN = env_secret("FATIA_METRICS_TOKEN")
# HTTP latency, Celery retries and failures and the discovery/reconcile pass times are counted in the shared cache
# (CACHE_URL, Redis) so that every web and worker process adds to the same figures; without CACHE_URL each process
# counts on its own (the demo). Keys live under this prefix there.
FATIA_METRICS_KEY_PREFIX = os.environ.get("FATIA_METRICS_KEY_PREFIX", "fatia:metrics:")
# /metrics is answered right after the probes, ahead of host validation (portal/metrics/http.py); request latency
# is timed from there, so it covers the whole middleware chain and the view.
MIDDLEWARE[MIDDLEWARE.index("portal.health.HealthCheckMiddleware") + 1 : 0] = [
    "portal.metrics.http.MetricsEndpointMiddleware",
    "portal.metrics.http.RequestLatencyMiddleware",
]

# --- Single sign-on (issue 11; tenants/sso/, docs/operations.md "Single sign-on") ---------------------------------
# OpenID Connect: the provider's issuer URL; its endpoints come from its discovery document
# (<issuer>/.well-known/openid-configuration), fetched on the first sign-in and cached. Empty: no SSO button.
FATIA_OIDC_ISSUER = os.environ.get("FATIA_OIDC_ISSUER", "").rstrip("/")
FATIA_OIDC_CLIENT_ID = os.environ.get("FATIA_OIDC_CLIENT_ID", "")
FATIA_OIDC_CLIENT_SECRET = env_secret("FATIA_OIDC_CLIENT_SECRET") or ""
FATIA_OIDC_SCOPES = os.environ.get("FATIA_OIDC_SCOPES", "openid email profile groups")
FATIA_OIDC_GROUPS_CLAIM = os.environ.get("FATIA_OIDC_GROUPS_CLAIM", "groups")
# Members of these groups are platform admins (is_staff), given and taken away at each SSO sign-in.
FATIA_OIDC_ADMIN_GROUPS = [g.strip() for g in os.environ.get("FATIA_OIDC_ADMIN_GROUPS", "").split(",") if g.strip()]
# Seconds to wait for the provider (discovery, token, keys, user info) before the sign-in page says it is down.
FATIA_OIDC_TIMEOUT_S = env_int("FATIA_OIDC_TIMEOUT_S", 5)
FATIA_OIDC_DISCOVERY_CACHE_S = env_int("FATIA_OIDC_DISCOVERY_CACHE_S", 3600)
# The button's words on the sign-in page, e.g. "Sign in with Keycloak".
FATIA_OIDC_BUTTON_LABEL = os.environ.get("FATIA_OIDC_BUTTON_LABEL", "Sign in with single sign-on")
# False: no username-and-password sign-in anywhere (the login page shows only the SSO button; Django's admin login
# refuses too). API tokens keep working.
FATIA_LOCAL_LOGIN = env_bool("FATIA_LOCAL_LOGIN", True)
# An authenticating proxy in front of the portal (OpenShift's oauth-proxy) that passes the user and their groups in
# headers. The headers count only when the connection comes straight from an address in the trusted ranges;
# from anywhere else they are ignored.
FATIA_AUTH_PROXY = env_bool("FATIA_AUTH_PROXY", False)
FATIA_AUTH_PROXY_TRUSTED_CIDRS = [
    c.strip() for c in os.environ.get("FATIA_AUTH_PROXY_TRUSTED_CIDRS", "").split(",") if c.strip()
]
FATIA_AUTH_PROXY_USER_HEADER = os.environ.get("FATIA_AUTH_PROXY_USER_HEADER", "X-Forwarded-User")
FATIA_AUTH_PROXY_GROUPS_HEADER = os.environ.get("FATIA_AUTH_PROXY_GROUPS_HEADER", "X-Forwarded-Groups")


def _check_sso_settings() -> None:
    import ipaddress

    for cidr in FATIA_AUTH_PROXY_TRUSTED_CIDRS:
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError as exc:
            raise ImproperlyConfigured(
                f"FATIA_AUTH_PROXY_TRUSTED_CIDRS: {cidr!r} is not an address range like 10.128.0.0/14."
            ) from exc
    if FATIA_AUTH_PROXY and not FATIA_AUTH_PROXY_TRUSTED_CIDRS:
        raise ImproperlyConfigured(
            "FATIA_AUTH_PROXY is on: set FATIA_AUTH_PROXY_TRUSTED_CIDRS to the proxy's addresses (e.g. 127.0.0.1/32 "
            "for an oauth-proxy sidecar); the user header is trusted only from there."
        )
    if FATIA_OIDC_ISSUER and not FATIA_OIDC_ISSUER.startswith(("https://", "http://")):
        raise ImproperlyConfigured(f"FATIA_OIDC_ISSUER must be a URL, not {FATIA_OIDC_ISSUER!r}.")
    if FATIA_OIDC_ISSUER and not FATIA_OIDC_CLIENT_ID:
        raise ImproperlyConfigured("FATIA_OIDC_ISSUER is set: set FATIA_OIDC_CLIENT_ID too.")
    if not FATIA_LOCAL_LOGIN and not FATIA_OIDC_ISSUER and not FATIA_AUTH_PROXY:
        raise ImproperlyConfigured(
            "FATIA_LOCAL_LOGIN is False but neither FATIA_OIDC_ISSUER nor FATIA_AUTH_PROXY is set: "
            "nobody could sign in."
        )
    for name in ("FATIA_AUTH_PROXY_USER_HEADER", "FATIA_AUTH_PROXY_GROUPS_HEADER"):
        value = globals()[name]
        if not value or not all(ch.isalnum() or ch == "-" for ch in value):
            raise ImproperlyConfigured(f"{name} must be a header name like X-Forwarded-User, not {value!r}.")


_check_sso_settings()
# Both sign-in backends are always installed; each does nothing unless its settings are on (tenants/sso/).
AUTHENTICATION_BACKENDS = [
    *AUTHENTICATION_BACKENDS,
    "tenants.sso.oidc.OidcBackend",
    "tenants.sso.proxy.AuthProxyBackend",
]
# The proxy's headers are read right after the session's user is known.
MIDDLEWARE.insert(
    MIDDLEWARE.index("django.contrib.auth.middleware.AuthenticationMiddleware") + 1,
    "tenants.sso.proxy.AuthProxyMiddleware",
)
# mozilla-django-oidc's own settings, for what our subclasses (tenants/sso/oidc.py) leave to it.
OIDC_RP_SIGN_ALGO = "RS256"
OIDC_USE_PKCE = True
OIDC_PKCE_CODE_CHALLENGE_METHOD = "S256"
OIDC_USE_NONCE = True
OIDC_CREATE_USER = True
OIDC_STORE_ID_TOKEN = False
OIDC_STORE_ACCESS_TOKEN = False

# --- Node agent (issue 12): the portal's side of `python -m agent` (allocations/nodeagent/) -----------------------
INSTALLED_APPS += ["allocations.nodeagent"]
# A node whose agent has reported before but not for this long is marked agent-silent (placement skips it until the
# agent is heard again).
FATIA_AGENT_SILENT_AFTER_S = env_int("FATIA_AGENT_SILENT_AFTER_S", 60)
# History kept: one row per device per minute, and per hour.
FATIA_AGENT_MINUTES_KEPT_DAYS = env_int("FATIA_AGENT_MINUTES_KEPT_DAYS", 7)
FATIA_AGENT_HOURS_KEPT_DAYS = env_int("FATIA_AGENT_HOURS_KEPT_DAYS", 90)

# --- Container image (issue 11, deploy/Containerfile) ---------------------------------------------------------
# Where collectstatic puts the static files. The image collects them at build time into /app/staticfiles, on the
# read-only root filesystem, because the writable place (FATIA_DATA_DIR, /tmp in the image) is an empty volume at
# run time. Elsewhere they stay under FATIA_DATA_DIR as before.
STATIC_ROOT = Path(os.environ.get("FATIA_STATIC_ROOT") or DATA_DIR / "staticfiles")

# --- Node agent DaemonSet (issue 12, package `chart`): agents bootstrap their credential by TokenReview ------------
# `<namespace>:<name>` of the ServiceAccount the agent DaemonSet runs as (the chart sets it). Empty: the bootstrap
# endpoint (POST /api/v1/agent/bootstrap/) answers 404 and credentials come from admins only.
FATIA_AGENT_SERVICE_ACCOUNT = os.environ.get("FATIA_AGENT_SERVICE_ACCOUNT", "").strip()
# The audience of the agents' projected tokens: a token minted for anything else (the API server) is refused.
FATIA_AGENT_TOKEN_AUDIENCE = os.environ.get("FATIA_AGENT_TOKEN_AUDIENCE", "fatia-agent").strip()
if FATIA_AGENT_SERVICE_ACCOUNT:
    _sa_namespace, _, _sa_name = FATIA_AGENT_SERVICE_ACCOUNT.partition(":")
    if not all(
        part != ""
        and part.isascii()
        and part[0].isalnum()
        and part[-1].isalnum()
        and all(ch.isdigit() or ch.islower() or ch in "-." for ch in part)
        for part in (_sa_namespace, _sa_name)
    ):
        raise ImproperlyConfigured(
            f"FATIA_AGENT_SERVICE_ACCOUNT must be <namespace>:<name>, not {FATIA_AGENT_SERVICE_ACCOUNT!r}."
        )
    if FATIA_CLUSTER_BACKEND != "kubernetes":
        raise ImproperlyConfigured(
            "FATIA_AGENT_SERVICE_ACCOUNT needs FATIA_CLUSTER_BACKEND 'kubernetes' (TokenReview)."
        )
    if not FATIA_AGENT_TOKEN_AUDIENCE:
        raise ImproperlyConfigured("FATIA_AGENT_TOKEN_AUDIENCE must not be empty when agents bootstrap.")
# --- Idle reclaim and showback "used" (issue 12, package reclaim: allocations/services/reclaim.py) ---------------
# A MIG device's memory at or below this many MiB counts as "no memory in use" (the driver's own reservation on an
# idle instance is a few MiB, never zero on every GPU).
FATIA_IDLE_MEMORY_MIB = env_int("FATIA_IDLE_MEMORY_MIB", 64)
# Telemetry gaps longer than this many minutes (agent or portal down) make idleness unknown again: idle time is
# counted only over minutes the agent reported.
FATIA_IDLE_GAP_MINUTES = env_int("FATIA_IDLE_GAP_MINUTES", 5)
# --- Static MIG, agent mode (issue 12, package "static": allocations/services/reconfiguration.py) ----------------
# Where NVIDIA's DRA kubelet plugin runs, and the label selector of its pods (the driver chart's defaults: release
# namespace dra-driver-nvidia-gpu, component label dra-driver-nvidia-gpu-component=kubelet-plugin). The portal
# deletes the pod on a node after changing its MIG layout, so that the DaemonSet starts a new one that publishes
# the MIG devices now there.
FATIA_DRA_PLUGIN_NAMESPACE = os.environ.get("FATIA_DRA_PLUGIN_NAMESPACE", "dra-driver-nvidia-gpu")
FATIA_DRA_PLUGIN_SELECTOR = os.environ.get(
    "FATIA_DRA_PLUGIN_SELECTOR", "dra-driver-nvidia-gpu-component=kubelet-plugin"
)
# How long one step of a reconfiguration (the agent applying its commands, the plugin republishing) may take
# before the step counts as failed (retried once, then rolled back).
FATIA_RECONFIGURATION_STEP_TIMEOUT_S = env_int("FATIA_RECONFIGURATION_STEP_TIMEOUT_S", 300)
# Seconds between two looks at a reconfiguration in progress.
FATIA_RECONFIGURATION_POLL_S = env_int("FATIA_RECONFIGURATION_POLL_S", 2)
# --- Telemetry ingest (issue 12, package `ingest`; allocations/nodeagent/authentication.py) -------------------------
# How long a web process trusts a node agent credential it has checked (a query saved per report); a revocation
# reaches every process within this bound (the revoking one at once). 0: look it up on every request.
FATIA_AGENT_CREDENTIAL_CACHE_S = env_int("FATIA_AGENT_CREDENTIAL_CACHE_S", 10)
# --- MIG-manager mode and pre-shaping (issue 12, package `manager`; allocations/cluster/migmanager.py) -------------
# Where NVIDIA's MIG manager (GPU Operator) reads its mig-parted config: the ConfigMap's `config.yaml` key. Fatia adds
# its own `fatia-<hash>` entries there and never touches the others.
FATIA_MIG_MANAGER_NAMESPACE = os.environ.get("FATIA_MIG_MANAGER_NAMESPACE", "gpu-operator")
FATIA_MIG_MANAGER_CONFIGMAP = os.environ.get("FATIA_MIG_MANAGER_CONFIGMAP", "default-mig-parted-config")
# How long a node may stay `pending` after Fatia set its nvidia.com/mig.config before the change counts as failed
# (the manager drains GPU clients and may reset GPUs: minutes on a busy node).
FATIA_MIG_MANAGER_TIMEOUT_S = env_int("FATIA_MIG_MANAGER_TIMEOUT_S", 900)
# Pre-shaping: a static pool with no request placed for this long is quiet, and its free instances may be reshaped
# for the learned demand mix (allocations/mig/preshape_fleet.py). 0 (the default) turns pre-shaping off everywhere:
# in the simulation it cuts the reconfigurations requests wait for, but serving as much compute as without it is not
# shown (docs/benchmarks.md, "preshape-fleet"; docs/agent.md, "Pre-shaping"); 600 is a sensible value to try it.
FATIA_PRESHAPE_QUIET_S = env_int("FATIA_PRESHAPE_QUIET_S", 0)
# --- Lose no work (issue 16, package `outbox`; allocations/services/outbox.py, docs/outbox.md) ----------------------
# A task due after a commit is written to the outbox in the same transaction and sent after it. Beat sweeps the outbox
# every FATIA_OUTBOX_SWEEP_S seconds and sends again what is not done: a row that never reached the broker at once,
# one sent but not done after FATIA_OUTBOX_RESEND_S (doubling on each send, up to 32 times). Done rows are deleted
# after FATIA_OUTBOX_KEEP_HOURS; a row sent FATIA_OUTBOX_MAX_SENDS times is given up (logged; the stuck-request
# sweep still looks at the request itself).
FATIA_OUTBOX_SWEEP_S = env_int("FATIA_OUTBOX_SWEEP_S", 10)
FATIA_OUTBOX_RESEND_S = env_int("FATIA_OUTBOX_RESEND_S", 30)
FATIA_OUTBOX_KEEP_HOURS = env_int("FATIA_OUTBOX_KEEP_HOURS", 72)
FATIA_OUTBOX_MAX_SENDS = env_int("FATIA_OUTBOX_MAX_SENDS", 30)
# A request APPROVED, PROVISIONING or RELEASING this long with no task working on it lost its task: the beat's
# requeue (services/requeue.py, every FATIA_OUTBOX_SWEEP_S, whatever the cluster backend) queues it again. On
# Kubernetes, PROVISIONING waits at least the claim's own allocation deadline.
FATIA_STUCK_REQUEST_S = env_int("FATIA_STUCK_REQUEST_S", 120)
# A view that finds the database down answers 503 with Retry-After, not 500 (portal/unavailable.py). Last, so it is
# the first to see a view's exception.
MIDDLEWARE = [*MIDDLEWARE, "portal.unavailable.DatabaseUnavailableMiddleware"]

# --- sharedcore (issue 13: sharing GPUs without MIG) ---------------------------------------------------------------
# Two choice sets share the field name `kind` in the API schema (a pool's kind, a node event's kind): name the pool's.
SPECTACULAR_SETTINGS["ENUM_NAME_OVERRIDES"]["PoolKindEnum"] = "allocations.models.NodePool.Kind"  # type: ignore[index]

# --- Telemetry ingest, queued (session 6, package `ingest`; allocations/nodeagent/ingest_queue.py, drain.py) ---------
# A Redis URL (e.g. redis://redis:6379/2) turns on accept-then-apply: a telemetry report is checked, appended to a
# Redis stream and answered 202, and `manage.py drain_telemetry` (the image's `ingest` role, one process) applies
# queued reports in batches. Empty: each report is applied in its request (200), as the demo does.
FATIA_INGEST_QUEUE_URL = env_secret("FATIA_INGEST_QUEUE_URL") or ""
# Reports accepted and not yet applied past which telemetry is refused with 503 + Retry-After (the agents keep
# their samples and retry). 5,000 is 25 s of 1,000 nodes reporting every 5 s: well under FATIA_AGENT_SILENT_AFTER_S,
# so a node is never marked silent for reports still in the queue.
FATIA_INGEST_BACKLOG_MAX = env_int("FATIA_INGEST_BACKLOG_MAX", 5000)
FATIA_INGEST_RETRY_AFTER_S = env_int("FATIA_INGEST_RETRY_AFTER_S", 5)
# Reports the drain worker applies in one transaction at most.
FATIA_INGEST_BATCH = env_int("FATIA_INGEST_BATCH", 500)
# A report read by a drain worker that has not acknowledged it for this long is taken over by another (or by the
# same one restarted under another name); the apply skips samples already applied.
FATIA_INGEST_CLAIM_IDLE_S = env_int("FATIA_INGEST_CLAIM_IDLE_S", 30)

# --- Broker queues (session 7, package `outbox`; portal/broker.py, docs/operations.md "The broker") ----------------
# `quorum` (RabbitMQ only, CELERY_BROKER_URL=amqp://...): Celery's queues are declared as quorum queues, replicated
# and durable, with publisher confirms and native delayed delivery for countdowns. `classic`: Celery's defaults.
from portal import broker  # noqa: E402 (kept in this block)

FATIA_BROKER_QUEUE_TYPE = os.environ.get("FATIA_BROKER_QUEUE_TYPE", "classic")
_queue_type = broker.queue_type_settings(FATIA_BROKER_QUEUE_TYPE, CELERY_BROKER_URL)
if _queue_type:
    CELERY_TASK_DEFAULT_QUEUE_TYPE = _queue_type["task_default_queue_type"]
    CELERY_TASK_DEFAULT_EXCHANGE_TYPE = _queue_type["task_default_exchange_type"]
    CELERY_BROKER_TRANSPORT_OPTIONS = {**CELERY_BROKER_TRANSPORT_OPTIONS, **_queue_type["broker_transport_options"]}
# Redis: a visibility timeout per queue, `queue=seconds,...`, overriding FATIA_BROKER_VISIBILITY_TIMEOUT_S for the
# workers that consume those queues (`celery worker -Q ...`); each such group restores only its own messages.
FATIA_BROKER_VISIBILITY_TIMEOUTS = broker.parse_visibility_timeouts(
    os.environ.get("FATIA_BROKER_VISIBILITY_TIMEOUTS", "")
)

# --- Compaction (session 7, package `compact`; issue 14: allocations/services/compaction.py, docs/compaction.md) ---
# How often the beat looks for fragmented pools, and the most moves one of its (or an admin's) plans makes: each
# move restarts a movable request's pods.
FATIA_COMPACTION_INTERVAL_S = env_int("FATIA_COMPACTION_INTERVAL_S", 600)
FATIA_COMPACTION_MAX_MOVES = env_int("FATIA_COMPACTION_MAX_MOVES", 4)

# --- Bookings (session 7, package `booking`; allocations/services/bookings.py, docs/bookings.md) ---------------------
# How far ahead a booking may start.
FATIA_BOOKING_HORIZON_DAYS = env_int("FATIA_BOOKING_HORIZON_DAYS", 90)
# At a booking's start, while leases past their end still hold slots (the expiry beat frees them within a minute), the
# booking waits this long for its room before it fails.
FATIA_BOOKING_START_GRACE_S = env_int("FATIA_BOOKING_START_GRACE_S", 300)

# --- queue (session 7, package `queue`; issue 15: waiting instead of failing; docs/queue.md) ------------------------
# Fair order across tenants decays each tenant's usage of a pool with this half-life (Kueue's admission fair sharing,
# usageHalfLifeTime): usage H ago counts half, 2H ago a quarter.
FATIA_QUEUE_HALF_LIFE_S = env_int("FATIA_QUEUE_HALF_LIFE_S", 4 * 3600)
# Starvation bound: the first queued request in order that has waited this long gets a node reserved for it.
FATIA_QUEUE_RESERVE_AFTER_S = env_int("FATIA_QUEUE_RESERVE_AFTER_S", 3600)
# The slow safety sweep of every pool's queue (admission itself follows releases, expiries and new nodes).
FATIA_QUEUE_SWEEP_S = env_int("FATIA_QUEUE_SWEEP_S", 300)

# --- Telemetry ingest, session 7 (package `ingest`; allocations/nodeagent/shared_credentials.py) -------------------
# With the queue on: how long a node agent credential checked once stays shared in the queue's Redis for every web
# process (no query per report). A revocation drops it when it commits, so this bounds only a lookup that raced the
# revocation, or a revocation while Redis was unreachable. Longer than a telemetry period, or most reports pay the
# lookup again. 0: nothing shared, a query per report.
FATIA_INGEST_CREDENTIAL_TTL_S = env_int("FATIA_INGEST_CREDENTIAL_TTL_S", 60)

# --- Tenant namespaces (session 7, package `namespaces`; issue 17: tenants/namespaces.py, docs/kubernetes.md) ---
# The portal's own Kubernetes identity, `<namespace>:<serviceaccount>`: what the RoleBindings in tenant namespaces
# bind, and the one user the claim admission policy lets create NVIDIA claims there.
FATIA_KUBE_PORTAL_SERVICE_ACCOUNT = os.environ.get("FATIA_KUBE_PORTAL_SERVICE_ACCOUNT", "fatia-system:fatia-portal")
# The ClusterRole (claim and pod verbs only) that those RoleBindings grant; the chart and
# deploy/control-plane/portal-rbac.yaml make it, never bound cluster-wide.
FATIA_KUBE_NAMESPACE_ROLE = os.environ.get("FATIA_KUBE_NAMESPACE_ROLE", "fatia-portal-namespace")

# --- Tenant namespaces, session 8 (branch s8-ns; issue 17: member workload rights; docs/workloads.md) -------------
# The ClusterRole of what members may do with workloads (Deployments, Jobs, StatefulSets, Services...) in a tenant's
# namespaces. Never bound cluster-wide: the portal binds the member group to it per namespace (RoleBinding
# fatia-member-workloads), which RBAC allows because the portal may `bind` this one ClusterRole by name.
FATIA_KUBE_MEMBER_ROLE = os.environ.get("FATIA_KUBE_MEMBER_ROLE", "fatia-tenant-member")

# --- Steering that pays (session 8, issue 14; allocations/cluster/steering.py, docs/kubernetes.md "Steering") -------
# Steer kube-scheduler to the slot our placement policy chose, with DeviceTaintRules on the devices it would take
# first. "adaptive": only while arrivals in the pool are sparse, since a steered claim keeps its GPU to itself until
# it is allocated and so spreads a burst; "always"; "off": the scheduler's first-fit slot on the GPU we choose.
# True and False, its values before, still mean always and off.
_steer_modes = {"off": "off", "adaptive": "adaptive", "always": "always", "False": "off", "True": "always"}
FATIA_KUBE_STEER_SLOTS = _steer_modes.get(os.environ.get("FATIA_KUBE_STEER_SLOTS", "adaptive"), "")
if not FATIA_KUBE_STEER_SLOTS:
    raise ImproperlyConfigured(
        "FATIA_KUBE_STEER_SLOTS must be 'off', 'adaptive' or 'always' (True and False still mean always and off), "
        f"not {os.environ['FATIA_KUBE_STEER_SLOTS']!r}."
    )
# "adaptive" steers a request only while at most this many other requests of its pool are in flight (approved, their
# claims not yet allocated): 0, only a request that arrives alone.
FATIA_KUBE_STEER_MAX_IN_FLIGHT = env_int("FATIA_KUBE_STEER_MAX_IN_FLIGHT", 0)
if FATIA_KUBE_STEER_MAX_IN_FLIGHT < 0:
    raise ImproperlyConfigured(
        f"FATIA_KUBE_STEER_MAX_IN_FLIGHT must be 0 or more, not {FATIA_KUBE_STEER_MAX_IN_FLIGHT}."
    )

# --- Claim polls on a queue of their own (session 13, task kube; portal/broker.py, docs/benchmarks.md "The burst's
# slow middle") -------------------------------------------------------------------------------------------------------
# A claim's poll (await_claim_allocation_task) queued behind a burst's provisioning tasks waited for all of them: the
# requests approved first were recorded active after most of the burst. Every worker started without -Q consumes both
# queues, taking from each in turn.
CELERY_TASK_QUEUES = broker.task_queues(FATIA_BROKER_QUEUE_TYPE)
CELERY_TASK_ROUTES = broker.TASK_ROUTES

# --- Fill left (session 14, task hook; issue 14: allocations/mig/fill_left.py, docs/placement.md "ours-hold") ---------
# The hold policy's rule for a request that would open an empty GPU while a pool fills (admission `hold` only):
# "off", "raw" (the 7g share from the counts of now) or "trusted" (blended with the prior); unset: the policy's default.
FATIA_HOLD_FILL_LEFT = os.environ.get("FATIA_HOLD_FILL_LEFT", "")
if FATIA_HOLD_FILL_LEFT not in ("", "off", "raw", "trusted"):
    raise ImproperlyConfigured(f"FATIA_HOLD_FILL_LEFT must be 'off', 'raw' or 'trusted', not {FATIA_HOLD_FILL_LEFT!r}.")
