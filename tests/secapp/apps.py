from django.apps import AppConfig


class SecAppConfig(AppConfig):
    name = "tests.secapp"
    label = "secapp"
    default_auto_field = "django.db.models.BigAutoField"
