"""Console pages of the core app."""
urlpatterns: list = []
