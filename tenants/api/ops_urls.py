"""ops_urls routes of the tenants app."""
urlpatterns: list = []
