"""Console pages of the billing app."""
urlpatterns: list = []
