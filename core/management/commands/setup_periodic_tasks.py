"""Write the periodic schedule registry (core.periodic) into django-celery-beat. Idempotent."""

import json

from django.core.management.base import BaseCommand
from django.db import transaction
from django_celery_beat.models import CrontabSchedule, IntervalSchedule, PeriodicTask

from core.periodic import PERIODIC_TASKS


class Command(BaseCommand):
    help = "Create or update the beat schedule from core.periodic.PERIODIC_TASKS; removes entries no longer registered."

    @transaction.atomic
    def handle(self, *args, **options):
        names = set()
        for spec in PERIODIC_TASKS:
            names.add(spec.name)
            defaults = {
                "task": spec.task,
                "enabled": True,
                "interval": None,
                "crontab": None,
                "expire_seconds": spec.expires_seconds,
                "kwargs": json.dumps({}),
            }
            if spec.every_seconds:
                defaults["interval"], _ = IntervalSchedule.objects.get_or_create(
                    every=spec.every_seconds, period=IntervalSchedule.SECONDS
                )
            else:
                minute, hour, dom, month, dow = spec.crontab.split()
                defaults["crontab"], _ = CrontabSchedule.objects.get_or_create(
                    minute=minute, hour=hour, day_of_month=dom, month_of_year=month, day_of_week=dow, timezone="UTC"
                )
            PeriodicTask.objects.update_or_create(name=spec.name, defaults=defaults)
        stale = PeriodicTask.objects.exclude(name__in=names).exclude(name__startswith="celery.")
        removed = stale.count()
        stale.delete()
        self.stdout.write(f"{len(names)} periodic tasks registered, {removed} stale removed.")
