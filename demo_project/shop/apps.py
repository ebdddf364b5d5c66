from django.apps import AppConfig


class ShopConfig(AppConfig):
    """The demo shop: orders, payments and emails driven by ultimate_jobs."""

    name = "demo_project.shop"
    label = "shop"
    default_auto_field = "django.db.models.BigAutoField"
