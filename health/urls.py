"""Console pages of the health app."""
urlpatterns: list = []
