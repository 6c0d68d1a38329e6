"""Console pages for end of life: disposition plans and certificates of sanitisation."""
from django.urls import path

from . import eol_views

urlpatterns = [
    path("plans/disposition/", eol_views.plan_list, name="disposition-plans"),
    path("plans/disposition/<str:pk>/", eol_views.plan_detail, name="disposition-plan"),
    path("plans/disposition/<str:pk>/nodes/", eol_views.plan_node_action, name="disposition-plan-nodes"),
    path("fleet/nodes/<str:pk>/certificate/", eol_views.certificate, name="node-certificate"),
    path("fleet/nodes/<str:pk>/certificate.pdf", eol_views.certificate_pdf, name="node-certificate-pdf"),
]
