"""ops_urls routes of the core app."""
urlpatterns: list = []
