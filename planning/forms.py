"""Console forms → the bodies the API takes: the plan pages post plain HTML forms, these turn
their strings into the same parameters an API client sends (then checked by the same
serializers), and back into the strings a form shows."""

from __future__ import annotations

import re

from planning.engines.disposition.market import BOUND_NAMES

NUMBER_FIELDS = (
    "target_perf_per_gpu",
    "burn_in_days",
    "cut_over_days",
    "drain_days",
    "sanitise_days",
    "ship_days",
    "capacity_floor_gpus",
    "capacity_floor_perf",
    "largest_job_gpus",
    "horizon_weeks",
)
NULLABLE_FIELDS = ("burn_in_days", "target_perf_per_gpu", "capacity_floor_perf")


def migration_form_values(params: dict) -> dict:
    """Parameters → the strings the form shows."""
    upgrade = (params.get("facility_upgrades") or [{}])[0] if params.get("facility_upgrades") else {}
    return {
        **{
            k: "" if params.get(k) is None else params[k]
            for k in ("name", "start", "target_node_type", "workload", "floor_unit", *NUMBER_FIELDS)
        },
        "halls": params.get("halls", []),
        "deliveries": "\n".join(
            ", ".join(str(x) for x in (d["date"], d["scalable_units"], d["racks_per_unit"], d.get("label", ""))).rstrip(
                ", "
            )
            for d in params.get("deliveries", [])
        ),
        "cdu_positions": " ".join(upgrade.get("positions", [])),
        "cdu_start": upgrade.get("earliest_start") or "",
        "cdu_lead_time_days": "" if upgrade.get("lead_time_days") is None else upgrade["lead_time_days"],
        "cdu_kw_after": "" if upgrade.get("power_kw_after") is None else upgrade["power_kw_after"],
    }


def migration_parameters_from_post(post) -> tuple[dict, list[dict]]:
    """The form's strings → API parameters (the service validates them like an API body)."""
    params: dict = {"halls": post.getlist("halls")}
    for key in ("name", "start", "target_node_type", "workload", "floor_unit"):
        if post.get(key, "").strip():
            params[key] = post[key].strip()
    for key in NUMBER_FIELDS:
        value = post.get(key, "").strip()
        if value:
            params[key] = value
        elif key in NULLABLE_FIELDS:
            params[key] = None
    errors = []
    deliveries = []
    for n, line in enumerate(post.get("deliveries", "").splitlines(), start=1):
        if not line.strip():
            continue
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 3:
            errors.append(
                {"field": "deliveries", "message": f"line {n}: write 'date, scalable units, racks per unit[, label]'"}
            )
            continue
        deliveries.append(
            {
                "date": parts[0],
                "scalable_units": parts[1],
                "racks_per_unit": parts[2],
                "label": parts[3] if len(parts) > 3 else "",
            }
        )
    if deliveries:
        params["deliveries"] = deliveries
    positions = [p for p in re.split(r"[\s,]+", post.get("cdu_positions", "")) if p]
    if positions:
        upgrade = {"kind": "cdu_install", "positions": positions}
        for form_key, key in (
            ("cdu_start", "earliest_start"),
            ("cdu_lead_time_days", "lead_time_days"),
            ("cdu_kw_after", "power_kw_after"),
        ):
            if post.get(form_key, "").strip():
                upgrade[key] = post[form_key].strip()
        params["facility_upgrades"] = [upgrade]
    else:
        params["facility_upgrades"] = []
    return params, errors


DEMAND_ROWS = 3


DEFAULT_DEMANDS = [("inference", 64, "2.00", "0.80", 24), ("batch", 32, "1.40", "0.70", 24)]


def disposition_body_from_post(post) -> dict:
    demands = []
    for i in range(DEMAND_ROWS):
        pool = post.get(f"pool_{i}", "").strip()
        if pool:
            demands.append(
                {
                    "pool": pool,
                    "nodes_wanted": post.get(f"nodes_{i}"),
                    "value_per_gpu_hour": post.get(f"value_{i}"),
                    "utilisation": post.get(f"util_{i}"),
                    "horizon_months": post.get(f"months_{i}"),
                }
            )
    selection = {k: post.get(k, "").strip() for k in ("generation", "gpu_model")}
    if post.get("hall_id"):
        selection["hall_id"] = post["hall_id"]
    if post.get("min_age_years", "").strip():
        selection["min_age_years"] = post["min_age_years"].strip()
    body = {
        "name": post.get("name", "").strip(),
        "selection": selection,
        "demands": demands,
        "horizon_months": post.get("horizon_months"),
        "channel": post.get("channel", "broker"),
    }
    if post.get("lease_cap_nodes", "").strip():
        body["lease_cap_nodes"] = post["lease_cap_nodes"].strip()
    overrides = {name: post[f"market_{name}"].strip() for name in BOUND_NAMES if post.get(f"market_{name}", "").strip()}
    if overrides:
        body["market_overrides"] = overrides
    if post.get("override_reason", "").strip():
        body["override_reason"] = post["override_reason"].strip()
    if post.get("migration_plan_id", "").strip():
        body["migration_plan_id"] = post["migration_plan_id"].strip()
    return body


def flat_errors(errors, prefix=""):
    if isinstance(errors, dict):
        for k, v in errors.items():
            yield from flat_errors(v, f"{prefix}.{k}" if prefix else k)
    elif isinstance(errors, list):
        for i, v in enumerate(errors):
            if isinstance(v, (dict, list)):
                yield from flat_errors(v, f"{prefix}[{i}]")
            else:
                yield prefix, str(v)


CAPACITY_MONTHS = 6
# The model select's value for "my own model": its figures come from the custom_* fields.
CUSTOM_MODEL = "custom"
# Form field → the API's model field (bounds in planning.api.serializers.ModelIn).
CUSTOM_MODEL_FIELDS = (
    ("custom_name", "name"),
    ("custom_total_params_b", "total_params_b"),
    ("custom_active_params_b", "active_params_b"),
    ("custom_layers", "layers"),
    ("custom_attention_heads", "attention_heads"),
    ("custom_kv_heads", "kv_heads"),
    ("custom_head_dim", "head_dim"),
    ("custom_context_tokens", "context_tokens"),
    ("custom_precision", "precision"),
    ("custom_attention", "attention"),
    ("custom_kv_lora_rank", "kv_lora_rank"),
    ("custom_qk_rope_head_dim", "qk_rope_head_dim"),
    ("custom_routed_experts", "routed_experts"),
    ("custom_experts_per_token", "experts_per_token"),
    ("custom_expert_params_b", "expert_params_b"),
)


def capacity_body_from_post(post) -> dict:
    forecast = []
    for i in range(CAPACITY_MONTHS):
        month = post.get(f"month_{i}", "").strip()
        if month:
            forecast.append(
                {
                    "month": month,
                    "tokens_per_s": post.get(f"tokens_{i}") or None,
                    "prompt_tokens": post.get("prompt_tokens") or 0,
                    "output_tokens": post.get("output_tokens") or None,
                    "tpot_ms_target": post.get("tpot_ms_target") or None,
                    "ttft_ms_target": post.get("ttft_ms_target") or None,
                }
            )
    body = {
        "name": post.get("name", "").strip(),
        "model_name": post.get("model_name", ""),
        "forecast": forecast,
        "target_gpu_model": post.get("target_gpu_model") or "GB200-NVL72",
        "gpu_models": [m for m in post.getlist("gpu_models") if m],
    }
    if post.get("precision", "").strip():
        body["precision"] = post["precision"].strip()
    if post.get("measured_gpu_model", "").strip():
        # One measured operating point; the API takes any number of them.
        body["measured"] = {
            post["measured_gpu_model"].strip(): {
                "gpus_per_replica": post.get("measured_gpus_per_replica") or None,
                "tokens_per_s": post.get("measured_tokens_per_s") or None,
                "confirm_implausible": post.get("measured_confirm") == "yes",
            }
        }
    if body["model_name"] == CUSTOM_MODEL:
        # The same ModelIn the API uses checks every figure's bounds; blanks are reported as missing.
        body["model_name"] = ""
        body["model"] = {key: post[field].strip() for field, key in CUSTOM_MODEL_FIELDS if post.get(field, "").strip()}
    return body
