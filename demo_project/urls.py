from django.contrib import admin
from django.urls import include, path

from demo_project.shop.outbound import order_paid_hook

urlpatterns = [
    path("admin/", admin.site.urls),
    path("jobs/", include("ultimate_jobs.urls")),
    path("hooks/orders/", order_paid_hook, name="order-paid-hook"),
]
