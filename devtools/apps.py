from django.apps import AppConfig


class DevtoolsConfig(AppConfig):
    """Development and demo tooling: fleet seeding, the demo command, the fleet simulator.
    Nothing in the product imports it; production leaves it out of INSTALLED_APPS."""

    name = "devtools"
    verbose_name = "Development tools"
