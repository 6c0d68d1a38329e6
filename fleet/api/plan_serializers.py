"""Serializers of the migration-plan ops API (documented for drf-spectacular).

The request is ``PlanParametersSerializer`` (fleet.services.migration_inputs): the same
validation the console form uses. The response describes the stored plan; the weekly
timelines are plain JSON arrays of points.
"""
from rest_framework import serializers

from fleet.models import MigrationPlan


class VerdictsSerializer(serializers.Serializer):
    facility_first_ok = serializers.BooleanField()
    refused_positions = serializers.IntegerField()
    never_exceeds_power_budget = serializers.BooleanField()
    floor_held = serializers.BooleanField()
    min_capacity_gpus = serializers.IntegerField()
    min_capacity_date = serializers.DateField()
    min_capacity_perf = serializers.FloatField()
    largest_job_runnable_always = serializers.BooleanField()
    trough_gpu_days = serializers.IntegerField(help_text="GPU-days below the floor")
    naive_trough_gpu_days = serializers.DictField(child=serializers.IntegerField(),
                                                  help_text="GPU-days below the floor per naive sequence")


class PositionVerdictSerializer(serializers.Serializer):
    position_id = serializers.CharField(help_text="rack id")
    hall_id = serializers.CharField()
    rack = serializers.CharField(help_text="rack name")
    status = serializers.ChoiceField(choices=["ok_now", "after_upgrade", "never"])
    ready = serializers.DateField(allow_null=True)
    reason = serializers.CharField()


class PhaseSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=["facility_prep", "land", "burn_in", "cut_over", "drain", "sanitise", "ship"])
    start = serializers.DateField()
    end = serializers.DateField()
    position_ids = serializers.ListField(child=serializers.CharField())
    nodes = serializers.IntegerField()
    gpus = serializers.IntegerField()
    notes = serializers.CharField()


class PlacementSerializer(serializers.Serializer):
    rack_id = serializers.CharField(help_text="the new rack's id within the plan")
    position_id = serializers.CharField()
    hall_id = serializers.CharField()
    nodes = serializers.IntegerField()
    land = serializers.DateField()
    in_service = serializers.DateField()


class TimelinePointSerializer(serializers.Serializer):
    date = serializers.DateField()
    total_gpus = serializers.IntegerField()
    gpus_by_generation = serializers.DictField(child=serializers.IntegerField())
    largest_pool_gpus = serializers.IntegerField()
    perf_total = serializers.FloatField()
    perf_by_generation = serializers.DictField(child=serializers.FloatField())
    power_kw_by_hall = serializers.DictField(child=serializers.FloatField())
    power_kw_total = serializers.FloatField()
    budget_kw_by_hall = serializers.DictField(child=serializers.FloatField())
    budget_kw_total = serializers.FloatField()
    facility_power_kw = serializers.FloatField()


class TimelineSerializer(serializers.Serializer):
    points = TimelinePointSerializer(many=True)


class NaiveSequenceSerializer(serializers.Serializer):
    name = serializers.ChoiceField(choices=["decommission_first", "one_for_one_swap"])
    timeline = TimelineSerializer()
    phases = PhaseSerializer(many=True)
    trough_gpu_days = serializers.IntegerField()
    min_capacity_gpus = serializers.IntegerField()
    min_capacity_date = serializers.DateField()
    largest_job_runnable_always = serializers.BooleanField()
    stranded_racks = serializers.IntegerField()
    notes = serializers.ListField(child=serializers.CharField())


class AssumptionSerializer(serializers.Serializer):
    name = serializers.CharField()
    value = serializers.CharField()
    unit = serializers.CharField()
    source = serializers.CharField()


class PlanResultSerializer(serializers.Serializer):
    headline = serializers.CharField()
    feasible = serializers.BooleanField()
    fixes = serializers.ListField(child=serializers.CharField(), help_text="what would make an infeasible plan work")
    verdicts = VerdictsSerializer()
    position_verdicts = PositionVerdictSerializer(many=True)
    phases = PhaseSerializer(many=True)
    placements = PlacementSerializer(many=True)
    timeline = TimelineSerializer()
    naive = NaiveSequenceSerializer(many=True)
    fabric_notes = serializers.ListField(child=serializers.CharField())
    notes = serializers.ListField(child=serializers.CharField())
    assumptions = AssumptionSerializer(many=True)
    finish = serializers.DateField(allow_null=True)


class MigrationPlanSerializer(serializers.ModelSerializer):
    result = PlanResultSerializer()
    inputs = serializers.JSONField(help_text="{parameters: the complete operator parameters, resolved: the planner inputs}")
    actions = serializers.SerializerMethodField(help_text="scheduled actions per kind (after apply)")

    class Meta:
        model = MigrationPlan
        fields = ["id", "name", "created_by", "created_at", "status", "applied_at", "feasible", "actions",
                  "inputs", "result"]
        read_only_fields = fields

    def get_actions(self, obj) -> dict[str, int]:
        return dict(getattr(obj, "action_counts", None) or {})
