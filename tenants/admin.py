"""Tenant admin."""
from django.contrib import admin

from .models import Membership, Quota, StorageQuota, Tenant


class MembershipInline(admin.TabularInline):
    model = Membership
    extra = 0
    raw_id_fields = ("user",)


class QuotaInline(admin.TabularInline):
    model = Quota
    extra = 0


class StorageQuotaInline(admin.StackedInline):
    model = StorageQuota
    extra = 0
    max_num = 1


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin):
    list_display = ("slug", "name", "created_at")
    search_fields = ("slug", "name")
    inlines = [MembershipInline, QuotaInline, StorageQuotaInline]
