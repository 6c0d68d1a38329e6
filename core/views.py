"""Sign-in: where each kind of user lands."""

from django.contrib.auth.views import LoginView

OPERATOR_HOME = "/"
TENANT_HOME = "/portal/"


class SignInView(LoginView):
    """Operators land on the overview, tenant users on their portal. A `next` that points at
    the operator home (where an anonymous visit to / was sent from) is a tenant's portal too."""

    def get_redirect_url(self):
        url = super().get_redirect_url()
        user = self.request.user
        if user.is_authenticated and not user.is_staff and url in ("", OPERATOR_HOME):
            return TENANT_HOME
        return url

    def get_default_redirect_url(self):
        return OPERATOR_HOME if self.request.user.is_staff else TENANT_HOME
