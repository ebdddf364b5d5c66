"""Settings for the test suite (pytest-django, mypy's django plugin, makemigrations --check)."""

import importlib.util
import os

SECRET_KEY = "test"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ROOT_URLCONF = "tests.urls"

INSTALLED_APPS = [
    "django.contrib.contenttypes",
    "django.contrib.auth",
    "django.contrib.admin",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",  # the admin's CSS, served by the browser tests' live server
    "ultimate_jobs",
    "demo_project.shop",
    "tests.secapp",
    "tests.chaos",
]

# pytest-django creates test_<NAME>; set ULTIMATE_JOBS_TEST_DB per checkout/CI job so
# concurrent runs against the same server never share (or drop) each other's database.
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ.get("ULTIMATE_JOBS_TEST_DB", "ultimate_jobs"),
        "USER": "postgres",
        "HOST": "127.0.0.1",
        "PORT": "5432",
    },
}

ULTIMATE_JOBS = {"DRIVER": "memory"}

# The admin tests' users get a password hashed in microseconds, not through PBKDF2's million rounds
# (0.3 s of CPU each); no test reads a hash (Django's advice for test settings).
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Django's own task API on this queue (tests/postgres/test_django_tasks.py); 5.2 reads it through the
# django-tasks backport. The compatibility tests (tests/postgres/test_django_tasks_compat.py) run each test
# body on "reference", Django's ImmediateBackend, and on "jobs", a second JobsBackend: the tasks are
# declared on "default", so each is enqueued through `.using(backend=...)`, onto the "compat" queue too.
_IMMEDIATE = (
    "django.tasks.backends.immediate.ImmediateBackend"  # Django 6
    if importlib.util.find_spec("django.tasks") is not None
    else "django_tasks.backends.immediate.ImmediateBackend"
)
_TASK_RETRY = {"attempts": 2, "backoff": "fixed", "delay": "1s"}
TASKS = {
    "default": {
        "BACKEND": "ultimate_jobs.django_tasks.JobsBackend",
        "QUEUES": ["default", "tasks-low"],
        "OPTIONS": {"RETRY": _TASK_RETRY},
    },
    "jobs": {
        "BACKEND": "ultimate_jobs.django_tasks.JobsBackend",
        "QUEUES": ["default", "tasks-low", "compat"],
        "OPTIONS": {"RETRY": _TASK_RETRY},
    },
    "reference": {"BACKEND": _IMMEDIATE, "QUEUES": ["default", "tasks-low", "compat"]},
}

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
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
