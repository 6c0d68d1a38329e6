from django.apps import AppConfig


class PlanningConfig(AppConfig):
    name = "planning"
    verbose_name = "Planning"

    def ready(self):
        from core.problem_types import register_app

        register_app(self)  # planning/problems.csv: the problem codes this app raises
