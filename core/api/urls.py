"""Core's API routes (mounted by config/urls.py like every app's)."""

from .routes import api_route
from .views import search

urlpatterns: list = []
ops_urlpatterns = [api_route("search", search, "ops-search")]
