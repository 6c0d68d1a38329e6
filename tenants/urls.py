"""Console pages of the tenants app."""
urlpatterns: list = []
