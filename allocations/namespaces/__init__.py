"""The pages of the namespaces a tenant owns (issue 17): platform admins assign and remove them, the tenant's
members see them read-only. The changes are allocations/services/tenant_namespaces.py's; the API is
allocations/api/namespaces.py."""
