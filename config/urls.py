"""URL map. Each app owns its own url modules; this file only mounts them.

- console pages: core (overview, metrics), fleet, health, tenants (portal), billing
- /api/v1/            tenant API            (<app>/api/urls.py)
- /api/v1/ops/        operator API          (<app>/api/ops_urls.py)
- /api/agent/v1/      node agent API        (<app>/api/agent_urls.py)
"""
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from core.api.routes import api_route

handler404 = "core.api.problems.api_not_found"
handler500 = "core.api.problems.api_server_error"

APPS = ("core", "fleet", "health", "tenants", "billing")

api_v1 = [
    api_route("schema", SpectacularAPIView.as_view(), "schema"),
    api_route("docs", SpectacularSwaggerView.as_view(url_name="schema"), "docs"),
    path("ops/", include([path("", include(f"{app}.api.ops_urls")) for app in APPS])),
    *[path("", include(f"{app}.api.urls")) for app in APPS],
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include(api_v1)),
    path("api/agent/v1/", include([path("", include(f"{app}.api.agent_urls")) for app in APPS])),
    *[path("", include(f"{app}.urls")) for app in APPS],
]
