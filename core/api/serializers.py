"""Response shapes of core's own API routes (the operator search)."""

from rest_framework import serializers


class SearchHitSerializer(serializers.Serializer):
    kind = serializers.CharField(help_text="which identifier matched: hostname, gpu_uuid, drive_serial, …")
    id = serializers.CharField(help_text="id of the object carrying it (a GPU's or drive's own id)")
    label = serializers.CharField()
    url = serializers.CharField(help_text="console page that shows it (a GPU or drive opens its node)")
    match = serializers.ChoiceField(choices=["exact", "prefix"])
