from django.apps import AppConfig


class CoreConfig(AppConfig):
    name = "core"
    verbose_name = "Core"

    def ready(self):
        from celery.signals import task_postrun, task_prerun
        from django.contrib.auth.signals import user_logged_in
        from django.db.models.signals import post_migrate

        from core import loop_metrics
        from core.api import schema  # noqa: F401  registers the security schemes with drf-spectacular
        from core.middleware import start_idle_clock
        from core.problem_types import register_app
        from core.services import login_audit  # noqa: F401  connects the sign-in audit receivers
        from core.services.permissions import top_up_role_groups_after_migrate

        post_migrate.connect(top_up_role_groups_after_migrate, sender=self)
        user_logged_in.connect(start_idle_clock, dispatch_uid="hangar-idle-clock")
        # Every periodic task's pass lands in core.LoopRun, whichever worker runs it (/metrics).
        task_prerun.connect(loop_metrics.task_started, weak=False)
        task_postrun.connect(loop_metrics.task_finished, weak=False)
        register_app(self)  # core/problems.csv: the problem codes core raises (the API's own)
