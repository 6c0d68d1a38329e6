"""The node list's filters, one definition for the operator API and the console.

Both validate the same way: an unknown lifecycle or health value, a malformed hall id or a
`cordoned` that is not true/false is an error the caller sees (400 validation_error in the
API, a message on the page), never a silently unfiltered list.
"""

import django_filters

from .choices import Health, Lifecycle
from .models import Node

_BOOLEAN = [("true", "true"), ("false", "false"), ("1", "1"), ("0", "0")]


class NodeFilterSet(django_filters.FilterSet):
    site = django_filters.CharFilter(field_name="rack__hall__site__slug", help_text="site slug")
    hall = django_filters.UUIDFilter(field_name="rack__hall_id", help_text="hall id")
    rack = django_filters.CharFilter(field_name="rack__name", help_text="rack name")
    generation = django_filters.CharFilter(field_name="node_type__generation", help_text="e.g. hopper")
    lifecycle = django_filters.ChoiceFilter(choices=Lifecycle.choices)
    health = django_filters.ChoiceFilter(choices=Health.choices)
    cordoned = django_filters.TypedChoiceFilter(
        choices=_BOOLEAN, coerce=lambda value: value in ("true", "1"), help_text="true or false"
    )

    class Meta:
        model = Node
        fields = ["site", "hall", "rack", "generation", "lifecycle", "health", "cordoned"]

    def normalised(self) -> dict:
        """The valid filter values by name (None where not given): what a page token is bound to
        and what the console's form shows back. Call after is_valid()."""
        data = getattr(self.form, "cleaned_data", {})
        return {name: (None if data.get(name) in ("", None) else data[name]) for name in self.Meta.fields}

    def errors_as_list(self) -> list[dict]:
        return [
            {"field": field, "message": " ".join(str(m) for m in messages)} for field, messages in self.errors.items()
        ]
