"""Kubernetes work through the official client; imported only by commands that need a cluster."""
