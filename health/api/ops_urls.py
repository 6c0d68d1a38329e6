"""ops_urls routes of the health app."""
urlpatterns: list = []
