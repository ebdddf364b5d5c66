from django.apps import AppConfig


class ChaosConfig(AppConfig):
    name = "tests.chaos"
    label = "chaos"
    default_auto_field = "django.db.models.BigAutoField"
