"""Request and response shapes of the planning ops API (documented for drf-spectacular).

The migration-plan request is ``PlanParametersSerializer``: the console form goes through the
same serializer (``plan_parameters``), so both refuse bad input alike; what needs the inventory
is checked after it by ``planning.inputs.validate_parameters``. The response describes the
stored plan; the weekly timelines are plain JSON arrays of points.
"""

from collections.abc import Mapping
from decimal import Decimal

from rest_framework import serializers

from core.validators import validate_display_text
from planning.engines.capacity import PRECISIONS
from planning.engines.disposition.market import BOUND_NAMES, check_override
from planning.inputs import DEFAULT_TARGET, FLOOR_UNITS, PlanInputError, json_ready
from planning.models import MigrationPlan
from planning.services import disposition_plans as disposition


class StrictSerializer(serializers.Serializer):
    """Refuses fields it does not know: a misspelt field must not be silently ignored."""

    def to_internal_value(self, data):
        if isinstance(data, Mapping):
            unknown = sorted(str(k) for k in set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {k: [f"Unknown field; this object takes {', '.join(self.fields)}."] for k in unknown}
                )
        return super().to_internal_value(data)


# ---- migration plans: parameters (request)


class DeliverySerializer(StrictSerializer):
    date = serializers.DateField(help_text="day the scalable units arrive on site")
    scalable_units = serializers.IntegerField(min_value=1, max_value=1000)
    racks_per_unit = serializers.IntegerField(
        min_value=1, max_value=1000, help_text="racks of the target type per unit"
    )
    label = serializers.CharField(max_length=50, required=False, allow_blank=True, default="")


class FacilityUpgradeSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=["cdu_install"], default="cdu_install")
    positions = serializers.ListField(
        child=serializers.CharField(max_length=100),
        min_length=1,
        max_length=10000,
        help_text="rack ids or names (in the halls in scope) that get the upgrade",
    )
    earliest_start = serializers.DateField(required=False, help_text="default: the plan's start")
    lead_time_days = serializers.IntegerField(
        min_value=0,
        max_value=3650,
        required=False,
        allow_null=True,
        help_text="default: high end of cdu_lead_time (facility.csv)",
    )
    power_kw_after = serializers.FloatField(
        min_value=0,
        max_value=1000,
        required=False,
        allow_null=True,
        help_text="position power after the upgrade; default: high end of liquid_rack_capacity (facility.csv)",
    )
    cooling_kw_after = serializers.FloatField(
        min_value=0,
        max_value=1000,
        required=False,
        allow_null=True,
        help_text="position liquid cooling after the upgrade; default: as power_kw_after",
    )


class HallFacilitySerializer(StrictSerializer):
    """A hall's shared facility figures; each one given replaces the default the planner derives from
    the hall's positions (CDU: the liquid share of its liquid positions' cooling; room air: its air
    positions' cooling plus the residual-air share of its liquid positions')."""

    hall = serializers.UUIDField(help_text="hall id in scope")
    cdu_units = serializers.IntegerField(
        min_value=1,
        max_value=1000,
        required=False,
        allow_null=True,
        help_text="CDUs serving the hall; capacity counts all but one (N+1)",
    )
    cdu_unit_kw = serializers.FloatField(min_value=0, max_value=100_000, required=False, allow_null=True)
    air_cooling_kw = serializers.FloatField(
        min_value=0,
        max_value=1_000_000,
        required=False,
        allow_null=True,
        help_text="room-air heat the hall's air handlers remove",
    )
    floor_load_kpa = serializers.FloatField(
        min_value=0, max_value=1000, required=False, allow_null=True, help_text="rated distributed floor load"
    )


class CapacityUnitSerializer(StrictSerializer):
    label = serializers.CharField(
        max_length=200, help_text="e.g. output tokens/s (llama-3.1-70b, BF16, 1,000+250 tokens)"
    )
    per_gpu = serializers.DictField(
        child=serializers.FloatField(min_value=1e-6, max_value=1e9),
        allow_empty=False,
        help_text="node type slug -> this unit per GPU, for the target and every node type in scope",
    )
    source = serializers.CharField(max_length=300, required=False, default="operator input")


class FloorStepSerializer(StrictSerializer):
    start = serializers.DateField(help_text="the floor is perf from this day on")
    perf = serializers.FloatField(min_value=0, max_value=1e12)


class PlanParametersSerializer(StrictSerializer):
    """What an operator decides; every field has a default from the inventory or the reference data."""

    name = serializers.CharField(max_length=100, required=False, allow_blank=True, validators=[validate_display_text])
    start = serializers.DateField(required=False, help_text="first planned week; default: next Monday")
    halls = serializers.ListField(
        child=serializers.UUIDField(), required=False, min_length=1, help_text="hall ids in scope; default: all halls"
    )
    positions = serializers.ListField(
        child=serializers.CharField(max_length=100),
        required=False,
        min_length=1,
        help_text="rack ids or names in scope; default: every rack of the halls in scope",
    )
    target_node_type = serializers.SlugField(required=False, help_text=f"catalogue slug; default {DEFAULT_TARGET}")
    target_perf_per_gpu = serializers.FloatField(
        min_value=0.01,
        max_value=100,
        required=False,
        allow_null=True,
        help_text="H100-equivalents per target GPU for the workload; default: generations.csv",
    )
    perf_overrides = serializers.DictField(
        child=serializers.FloatField(min_value=0.01, max_value=100),
        required=False,
        allow_empty=True,
        help_text="node type slug -> H100-equivalents per GPU, overriding generations.csv for the current fleet",
    )
    workload = serializers.ChoiceField(
        choices=["training", "inference"],
        required=False,
        help_text="which generations.csv ratio normalises capacity (default training)",
    )
    floor_unit = serializers.ChoiceField(
        choices=list(FLOOR_UNITS),
        required=False,
        help_text="unit of the floor: h100e (default), gpus, or capacity_unit (default when capacity_unit is given)",
    )
    hall_facilities = HallFacilitySerializer(many=True, required=False, max_length=1000)
    deliveries = DeliverySerializer(many=True, required=False, allow_empty=False)
    burn_in_days = serializers.IntegerField(
        min_value=0,
        max_value=365,
        required=False,
        allow_null=True,
        help_text="default: burn_in_deadline (facility.csv, 24 h: the lifecycle's burn-in deadline) in whole days",
    )
    cut_over_days = serializers.IntegerField(min_value=0, max_value=365, required=False, default=1)
    drain_days = serializers.IntegerField(min_value=0, max_value=365, required=False, default=7)
    sanitise_days = serializers.IntegerField(min_value=0, max_value=365, required=False, default=7)
    ship_days = serializers.IntegerField(min_value=0, max_value=365, required=False, default=7)
    facility_upgrades = FacilityUpgradeSerializer(many=True, required=False)
    capacity_floor_gpus = serializers.IntegerField(
        min_value=0,
        max_value=10_000_000,
        required=False,
        help_text="raw GPU floor; default: today's GPUs when floor_unit=gpus, else 0",
    )
    capacity_floor_perf = serializers.FloatField(
        min_value=0,
        max_value=1e9,
        required=False,
        allow_null=True,
        help_text="H100-equivalent floor; default: today's H100-equivalents when floor_unit=h100e, else none",
    )
    largest_job_gpus = serializers.IntegerField(
        min_value=1,
        max_value=10_000_000,
        required=False,
        help_text="the largest job in H100s; one generation's pool holds it when its GPUs x ratio reach it "
        "(default: half of today's largest pool)",
    )
    capacity_unit = CapacityUnitSerializer(
        required=False,
        allow_null=True,
        help_text="count capacity in this unit instead of H100-equivalents (a capacity plan's output tokens/s)",
    )
    capacity_floor_schedule = FloorStepSerializer(
        many=True,
        required=False,
        max_length=120,
        help_text="a floor that changes over time in the plan's unit (a forecast's need per month)",
    )
    horizon_weeks = serializers.IntegerField(min_value=4, max_value=260, required=False, default=104)
    power_margin = serializers.FloatField(min_value=0, max_value=0.5, required=False, default=0.05)


def field_errors(detail, prefix: str = "") -> list[dict]:
    """DRF's nested errors → ``[{field, message}]`` with paths like ``deliveries[0].date``.

    DRF keys list items by int (``{0: {...}}``); those become ``[0]`` so the paths read the
    same as the ones this module writes itself.
    """
    if isinstance(detail, dict):
        out = []
        for key, value in detail.items():
            if isinstance(key, int):
                field = f"{prefix}[{key}]"
            elif key == "non_field_errors":
                field = prefix or "non_field_errors"
            else:
                field = f"{prefix}.{key}" if prefix else str(key)
            out.extend(field_errors(value, field))
        return out
    if isinstance(detail, list):
        out = []
        for index, item in enumerate(detail):
            out.extend(
                field_errors(item, f"{prefix}[{index}]")
                if isinstance(item, (dict, list))
                else [{"field": prefix or "non_field_errors", "message": str(item)}]
            )
        return out
    return [{"field": prefix or "non_field_errors", "message": str(detail)}]


def plan_parameters(data) -> dict:
    """A request body or console form → checked, JSON-ready migration-plan parameters.

    Raises ``PlanInputError`` with ``[{field, message}]`` like the inventory checks that follow."""
    if not isinstance(data, dict):
        raise PlanInputError([{"field": "non_field_errors", "message": "Send a JSON object of plan parameters."}])
    checked = PlanParametersSerializer(data=data)
    if not checked.is_valid():
        raise PlanInputError(field_errors(checked.errors))
    return json_ready(dict(checked.validated_data))


# ---- migration plans: the stored plan (response)


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
    naive_trough_gpu_days = serializers.DictField(
        child=serializers.IntegerField(), help_text="GPU-days below the floor per naive sequence"
    )
    # required=False: plans stored before these existed do not have them.
    trough_perf_days = serializers.FloatField(
        required=False, help_text="H100-equivalent-days below the normalised floor"
    )
    naive_trough_perf_days = serializers.DictField(
        child=serializers.FloatField(), required=False, help_text="the same per naive sequence, against the same floor"
    )
    old_fleet_retired = serializers.BooleanField(required=False, help_text="every old rack drained within the horizon")
    given_up_perf_days = serializers.FloatField(
        required=False, help_text="normalised-unit-days below today's capacity: drained before replaced"
    )
    need_met_always = serializers.BooleanField(
        required=False, help_text="false: a floor from a forecast exceeds what is in service even without drains"
    )
    need_shortfall_perf_days = serializers.FloatField(required=False)
    peak_cabled_gpus = serializers.IntegerField(
        required=False, help_text="most fabric endpoints cabled at once: in service, draining, sanitising, burn-in"
    )


class PositionVerdictSerializer(serializers.Serializer):
    position_id = serializers.CharField(help_text="rack id")
    hall_id = serializers.CharField()
    rack = serializers.CharField(help_text="rack name")
    status = serializers.ChoiceField(choices=["ok_now", "after_upgrade", "never"])
    ready = serializers.DateField(allow_null=True)
    reason = serializers.CharField()


class PhaseSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(
        choices=["facility_prep", "land", "burn_in", "cut_over", "drain", "sanitise", "ship"]
    )
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
    facility_power_kw = serializers.FloatField(help_text="air heat x the hall's PUE + liquid heat x the liquid PUE")
    largest_pool_perf = serializers.FloatField(required=False)
    cabled_gpus = serializers.IntegerField(required=False)
    floor_perf = serializers.FloatField(required=False, allow_null=True, help_text="the normalised floor in force")
    drained_perf = serializers.FloatField(required=False, help_text="capacity drained so far")


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
    trough_perf_days = serializers.FloatField(required=False)
    min_capacity_perf = serializers.FloatField(required=False)
    given_up_perf_days = serializers.FloatField(required=False)


class AssumptionSerializer(serializers.Serializer):
    name = serializers.CharField()
    value = serializers.CharField()
    unit = serializers.CharField()
    source = serializers.CharField()


class DrainItemSerializer(serializers.Serializer):
    position_id = serializers.CharField(help_text="rack id: its nodes are the ones drained")
    rack = serializers.CharField()
    hall_id = serializers.CharField()
    block = serializers.CharField()
    node_type = serializers.CharField()
    nodes = serializers.IntegerField()
    gpus = serializers.IntegerField()
    kw = serializers.FloatField()
    start = serializers.DateField(help_text="drain starts")
    drained = serializers.DateField()
    sanitised = serializers.DateField()
    shipped = serializers.DateField(help_text="position free")
    reason = serializers.CharField()
    frees = serializers.ChoiceField(choices=["position", "power", "retirement"])
    used = serializers.DateField(allow_null=True, help_text="when what it frees is first used")


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
    floor_gpus = serializers.IntegerField(required=False, help_text="raw GPU floor (0: none)")
    floor_perf = serializers.FloatField(required=False, allow_null=True, help_text="H100-equivalent floor (null: none)")
    perf_unit = serializers.CharField(required=False, help_text="what the normalised figures count")
    drains = DrainItemSerializer(many=True, required=False, help_text="the drain schedule rack by rack")
    binding_constraints = serializers.ListField(child=serializers.CharField(), required=False)
    largest_job_perf = serializers.FloatField(required=False, help_text="the largest job in the normalised unit")
    complete = serializers.DateField(
        required=False,
        allow_null=True,
        help_text="every new rack in service and every old rack out of service; finish adds sanitising and shipping",
    )


class MigrationPlanSerializer(serializers.ModelSerializer):
    result = PlanResultSerializer(allow_null=True, help_text="null until computed (computation: done)")
    computation = serializers.ChoiceField(
        choices=MigrationPlan.Computation.choices,
        help_text="queued/running: a worker is computing this large plan; done: result holds it; failed: see "
        "computation_error",
    )
    progress = serializers.FloatField(help_text="fraction of the planner's work done, as it reports (0..1)")
    inputs = serializers.JSONField(
        help_text="{parameters: the complete operator parameters, resolved: the planner inputs}"
    )
    actions = serializers.SerializerMethodField(help_text="scheduled actions per kind (after apply)")

    class Meta:
        model = MigrationPlan
        fields = [
            "id",
            "name",
            "created_by",
            "created_at",
            "status",
            "applied_at",
            "feasible",
            "computation",
            "progress",
            "computation_error",
            "computed_at",
            "actions",
            "inputs",
            "result",
        ]
        read_only_fields = fields

    def get_actions(self, obj) -> dict[str, int]:
        return dict(getattr(obj, "action_counts", None) or {})


# ---- disposition plans


class SelectionIn(serializers.Serializer):
    generation = serializers.CharField(required=False, allow_blank=True, default="", help_text="e.g. hopper")
    gpu_model = serializers.CharField(required=False, allow_blank=True, default="", help_text="e.g. H100")
    hall_id = serializers.UUIDField(required=False, allow_null=True, default=None)
    min_age_years = serializers.DecimalField(
        max_digits=5, decimal_places=2, required=False, allow_null=True, default=None, min_value=Decimal(0)
    )
    node_ids = serializers.ListField(child=serializers.UUIDField(), required=False, default=list, max_length=200_000)
    migration_plan_id = serializers.UUIDField(required=False, allow_null=True, default=None)

    def validate(self, attrs):
        if (
            not any(attrs.get(k) for k in ("generation", "gpu_model", "hall_id", "node_ids", "migration_plan_id"))
            and attrs.get("min_age_years") is None
        ):
            raise serializers.ValidationError(
                "select nodes by generation, gpu_model, hall_id, min_age_years, node_ids or migration_plan_id"
            )
        return attrs


class DemandIn(serializers.Serializer):
    pool = serializers.CharField(max_length=100, help_text="internal pool, e.g. inference")
    nodes_wanted = serializers.IntegerField(min_value=1)
    value_per_gpu_hour = serializers.DecimalField(
        max_digits=8, decimal_places=4, min_value=Decimal(0), help_text="USD per GPU-hour the pool's work is worth"
    )
    utilisation = serializers.DecimalField(max_digits=4, decimal_places=3, min_value=Decimal(0), max_value=Decimal(1))
    horizon_months = serializers.IntegerField(min_value=1, max_value=120)


class DispositionPlanIn(serializers.Serializer):
    name = serializers.CharField(max_length=200, validators=[validate_display_text])
    selection = SelectionIn()
    demands = DemandIn(many=True, required=False, default=list)
    horizon_months = serializers.IntegerField(min_value=1, max_value=120)
    channel = serializers.ChoiceField(choices=disposition.CHANNELS, default="broker")
    lease_cap_nodes = serializers.IntegerField(min_value=0, required=False, allow_null=True, default=None)
    rank_with_freed_power = serializers.BooleanField(
        default=False, help_text="rank options by cash + freed power (default: by cash; freed power shown apart)"
    )
    lease_on_demand = serializers.BooleanField(
        default=False,
        help_text="lease billed per used hour (utilisation applies); default: a contract billed every hour",
    )
    assumption_overrides = serializers.DictField(
        child=serializers.DecimalField(max_digits=14, decimal_places=4, min_value=Decimal(0)),
        required=False,
        default=dict,
        help_text="override reference defaults (with override_reason): " + ", ".join(disposition.OVERRIDABLE),
    )
    market_overrides = serializers.DictField(
        child=serializers.DecimalField(max_digits=10, decimal_places=4, min_value=Decimal(0)),
        required=False,
        default=dict,
        help_text="override the market bounds of economics.csv (with override_reason): " + ", ".join(BOUND_NAMES),
    )
    override_reason = serializers.CharField(
        max_length=500,
        required=False,
        allow_blank=True,
        default="",
        help_text="why the defaults are overridden; required with any override, shown on the plan",
    )
    migration_plan_id = serializers.UUIDField(
        required=False,
        allow_null=True,
        default=None,
        help_text="link a migration plan without taking the selection from its drain list: the nodes it drains "
        "are not kept in place, those it keeps in a hall it refills are charged for the kW they hold",
    )

    def validate_assumption_overrides(self, value):
        if len(value) > len(disposition.OVERRIDABLE):
            raise serializers.ValidationError(f"at most {len(disposition.OVERRIDABLE)} overrides")
        unknown = sorted(set(value) - set(disposition.OVERRIDABLE))
        if unknown:
            raise serializers.ValidationError(
                f"unknown assumptions {', '.join(unknown)}; overridable: {', '.join(disposition.OVERRIDABLE)}"
            )
        return value

    def validate_market_overrides(self, value):
        if len(value) > len(BOUND_NAMES):
            raise serializers.ValidationError(f"at most {len(BOUND_NAMES)} overrides")
        problems = [f"{name}: {p}" for name, v in sorted(value.items()) if (p := check_override(name, v))]
        if problems:
            raise serializers.ValidationError("; ".join(problems))
        return value

    def validate(self, attrs):
        if (attrs.get("assumption_overrides") or attrs.get("market_overrides")) and not attrs.get(
            "override_reason", ""
        ).strip():
            raise serializers.ValidationError(
                {"override_reason": "say why the defaults are overridden; the plan shows it beside the values"}
            )
        return attrs

    def validate_demands(self, value):
        pools = [d["pool"] for d in value]
        if len(pools) != len(set(pools)):
            raise serializers.ValidationError("each pool may appear once")
        return value


class DispositionPlanOut(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    inputs = serializers.JSONField()
    result = serializers.JSONField(
        help_text="split, option_returns, total_return, freed_power_value, allocations (with tranches and the "
        "constraint that decided them), market (the bounds with their sources or override reasons), migration "
        "(what a linked migration plan does with the nodes), constraints, blocks (option values per block), "
        "reasoning, assumptions (with sources)"
    )


# ---- capacity plans


class ModelIn(StrictSerializer):
    """A model's figures from its config.json (bounds: every number a client sends is bounded)."""

    name = serializers.CharField(max_length=100, validators=[validate_display_text])
    total_params_b = serializers.FloatField(min_value=0.1, max_value=100_000)
    active_params_b = serializers.FloatField(min_value=0.1, max_value=100_000)
    layers = serializers.IntegerField(min_value=1, max_value=10_000)
    attention_heads = serializers.IntegerField(
        min_value=1, max_value=10_000, required=False, help_text="query heads (num_attention_heads); default kv_heads"
    )
    kv_heads = serializers.IntegerField(min_value=1, max_value=10_000, help_text="num_key_value_heads")
    head_dim = serializers.IntegerField(min_value=1, max_value=10_000)
    context_tokens = serializers.IntegerField(min_value=1, max_value=100_000_000)
    precision = serializers.ChoiceField(choices=list(PRECISIONS), default="BF16", help_text="native precision")
    attention = serializers.ChoiceField(
        choices=["gqa", "mla"], default="gqa", help_text="gqa (K and V per KV head) or mla (latent + RoPE key)"
    )
    kv_lora_rank = serializers.IntegerField(min_value=0, max_value=100_000, default=0, help_text="MLA latent size")
    qk_rope_head_dim = serializers.IntegerField(min_value=0, max_value=100_000, default=0, help_text="MLA RoPE key")
    routed_experts = serializers.IntegerField(min_value=0, max_value=100_000, default=0, help_text="MoE: E")
    experts_per_token = serializers.IntegerField(min_value=0, max_value=1_000, default=0, help_text="MoE: top-k")
    expert_params_b = serializers.FloatField(
        min_value=0, max_value=100_000, default=0, help_text="MoE: one routed expert's parameters over all its layers"
    )

    def validate(self, attrs):
        attrs.setdefault("attention_heads", attrs["kv_heads"])
        errors = {}
        if attrs["active_params_b"] > attrs["total_params_b"]:
            errors["active_params_b"] = "active_params_b cannot exceed total_params_b"
        if attrs["attention"] == "mla" and attrs["kv_lora_rank"] < 1:
            errors["kv_lora_rank"] = "multi-head latent attention caches a latent of kv_lora_rank (e.g. 512)"
        experts, k, each = attrs["routed_experts"], attrs["experts_per_token"], attrs["expert_params_b"]
        if (experts > 0) != (k > 0) or (experts > 0) != (each > 0):
            errors["routed_experts"] = (
                "a mixture of experts gives routed_experts, experts_per_token and expert_params_b"
            )
        elif k > experts:
            errors["experts_per_token"] = "experts_per_token cannot exceed routed_experts"
        elif experts and experts * each > attrs["total_params_b"]:
            errors["expert_params_b"] = "routed_experts x expert_params_b cannot exceed total_params_b"
        elif experts and k * each > attrs["active_params_b"]:
            errors["expert_params_b"] = "experts_per_token x expert_params_b cannot exceed active_params_b"
        if errors:
            raise serializers.ValidationError(errors)
        return attrs


class ForecastMonthIn(StrictSerializer):
    month = serializers.DateField(help_text="first day of the month")
    requests_per_s = serializers.FloatField(min_value=0, max_value=1e9, required=False, allow_null=True, default=None)
    tokens_per_s = serializers.FloatField(
        min_value=0,
        max_value=1e12,
        required=False,
        allow_null=True,
        default=None,
        help_text="output tokens per second (instead of requests_per_s)",
    )
    prompt_tokens = serializers.IntegerField(min_value=0, max_value=10_000_000, default=0)
    output_tokens = serializers.IntegerField(min_value=1, max_value=10_000_000, help_text="output tokens per request")
    tpot_ms_target = serializers.FloatField(
        min_value=0.1,
        max_value=100_000,
        required=False,
        allow_null=True,
        default=None,
        help_text="time per output token target (ms); default reference_tpot_ms (inference.csv)",
    )
    ttft_ms_target = serializers.FloatField(
        min_value=1,
        max_value=1_000_000,
        required=False,
        allow_null=True,
        default=None,
        help_text="time to first token target (ms); default reference_ttft_ms (inference.csv)",
    )

    def validate(self, attrs):
        if attrs["tokens_per_s"] is None and attrs["requests_per_s"] is None:
            raise serializers.ValidationError("give requests_per_s or tokens_per_s")
        return attrs


class MeasuredIn(StrictSerializer):
    gpus_per_replica = serializers.IntegerField(min_value=1, max_value=1024)
    tokens_per_s = serializers.FloatField(min_value=0.001, max_value=1e9, help_text="output tokens/s per replica")
    confirm_implausible = serializers.BooleanField(
        default=False,
        help_text="keep a measurement outside 0.1x-10x of the model's estimate (else 400 naming tokens_per_s)",
    )


class CapacityPlanIn(StrictSerializer):
    name = serializers.CharField(max_length=200, validators=[validate_display_text])
    model_name = serializers.CharField(
        max_length=100,
        required=False,
        allow_blank=True,
        default="",
        help_text="a reference model (models.csv), or give model",
    )
    model = ModelIn(required=False)
    precision = serializers.ChoiceField(
        choices=list(PRECISIONS),
        required=False,
        allow_null=True,
        default=None,
        help_text="BF16, FP8 or FP4: bytes per weight, KV cache bytes and tensor throughput; default the model's own",
    )
    forecast = ForecastMonthIn(many=True, allow_empty=False, max_length=120)
    target_gpu_model = serializers.CharField(max_length=100, default="GB200-NVL72")
    gpu_models = serializers.ListField(
        child=serializers.CharField(max_length=100),
        required=False,
        default=list,
        max_length=20,
        help_text="other generations to size for comparison",
    )
    measured = serializers.DictField(
        child=MeasuredIn(), required=False, default=dict, help_text="GPU model -> operator-measured operating point"
    )
    racks_per_unit = serializers.IntegerField(min_value=1, max_value=1000, default=8)

    def validate(self, attrs):
        if not attrs.get("model_name") and "model" not in attrs:
            raise serializers.ValidationError("give model_name (a reference model) or model")
        return attrs


class CapacityPlanOut(serializers.Serializer):
    id = serializers.UUIDField()
    name = serializers.CharField()
    created_by = serializers.CharField()
    created_at = serializers.DateTimeField()
    inputs = serializers.JSONField()
    result = serializers.JSONField(help_text="model figures, months with needs per generation, gap, deliveries")
    migration_plan_id = serializers.UUIDField(allow_null=True)
