"""Settings for the demo project; every deployment knob comes from the environment."""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env()

SECRET_KEY = env("DJANGO_SECRET_KEY", default="demo-insecure-secret-key")
DEBUG = env.bool("DJANGO_DEBUG", default=True)
ALLOWED_HOSTS = env.list("DJANGO_ALLOWED_HOSTS", default=["127.0.0.1", "localhost"])

USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ROOT_URLCONF = "demo_project.urls"
WSGI_APPLICATION = "demo_project.wsgi.application"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.admin",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "ultimate_jobs",
    "demo_project.shop",
]

# The embedded default: an SQLite file under the project, created on first run — no server. A PostgreSQL
# DATABASE_URL (make demo DATABASE_URL=postgres://postgres@127.0.0.1:5432/ultimate_jobs_demo) runs the same
# demo on the Postgres driver: ULTIMATE_JOBS['DRIVER'] is left unset, so it follows the database.
DEMO_SQLITE_FILE = env("DEMO_SQLITE_FILE", default=str(BASE_DIR / ".demo" / "shop.sqlite3"))
DATABASES = {
    "default": env.db("DATABASE_URL", default=f"sqlite:///{DEMO_SQLITE_FILE}"),
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # writers wait for SQLite's one write lock instead of failing; atomic() takes it up front
    DATABASES["default"].setdefault("OPTIONS", {}).update(timeout=30, transaction_mode="IMMEDIATE")

# The shop's outbound work (demo_project/shop/outbound.py): where exports land, and the webhook secret.
SHOP_EXPORT_DIR = env("SHOP_EXPORT_DIR", default=str(BASE_DIR / "var" / "exports"))
SHOP_WEBHOOK_SECRET = env("SHOP_WEBHOOK_SECRET", default="demo-webhook-secret")

REDIS_URL = env("REDIS_URL", default="redis://127.0.0.1:6379/0")

ULTIMATE_JOBS = {
    **({"DRIVER": env("ULTIMATE_JOBS_DRIVER")} if env("ULTIMATE_JOBS_DRIVER", default=None) else {}),
    "REDIS_URL": REDIS_URL,
    # What a shop job reads as run.ctx: the payment gateway, mailer, carrier and warehouse.
    "CONTEXT": "demo_project.shop.services.shop_services",
    # the payments queue serves its orgs in turn: one org's month-end batch never holds another's payment
    "FAIR_QUEUES": ["payments"],
    # /jobs/metrics is staff-only unless a scraper's bearer token is set: curl -H "Authorization: Bearer $T"
    "METRICS_TOKEN": env("ULTIMATE_JOBS_METRICS_TOKEN", default=None),
}

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

STATIC_URL = "static/"
