"""View decorators for console pages."""
from django.contrib.auth.decorators import user_passes_test

operator_required = user_passes_test(lambda user: user.is_active and user.is_staff, login_url="/accounts/login/")
operator_required.__doc__ = "Console pages for operators: staff users only; others go to the login page."
