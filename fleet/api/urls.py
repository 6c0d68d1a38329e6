"""urls routes of the fleet app."""
urlpatterns: list = []
