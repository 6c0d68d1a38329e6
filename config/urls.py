"""URL map. Each app owns its own url modules; this file only mounts them.

- console pages: each app's urls.py (fleet also serves the overview and /metrics)
- /api/v1/            tenant API            (<app>/api/urls.py ``urlpatterns``)
- /api/v1/ops/        operator API          (<app>/api/urls.py ``ops_urlpatterns``)
- /api/agent/v1/      node agent API        (<app>/api/urls.py ``agent_urlpatterns``)
"""

from importlib import import_module

from django.conf import settings
from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from core.api.routes import api_route
from core.views import SignInView

handler404 = "core.api.problems.api_not_found"
handler500 = "core.api.problems.api_server_error"

APPS = ("fleet", "tenants", "billing", "health", "planning")
API = {app: import_module(f"{app}.api.urls") for app in ("core", *APPS)}


def _routes(kind: str) -> list:
    return [route for app in API for route in getattr(API[app], kind, [])]


api_v1 = [
    api_route("schema", SpectacularAPIView.as_view(), "schema"),
    api_route("docs", SpectacularSwaggerView.as_view(url_name="schema"), "docs"),
    path("ops/", include(_routes("ops_urlpatterns"))),
    *_routes("urlpatterns"),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("accounts/login/", SignInView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include(api_v1)),
    path("api/agent/v1/", include(_routes("agent_urlpatterns"))),
    path("", include("core.urls")),  # the console search (core.search)
    *[path("", include(f"{app}.urls")) for app in APPS],
]
if "devtools" in settings.INSTALLED_APPS:  # the twin's page, where the dev tools are installed
    urlpatterns.append(path("", include("devtools.urls")))
