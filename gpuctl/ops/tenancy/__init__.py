"""Tenants: a team's namespace, quota, queues, claims and the GPU fence."""
