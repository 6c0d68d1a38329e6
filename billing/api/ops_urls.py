"""ops_urls routes of the billing app."""
urlpatterns: list = []
