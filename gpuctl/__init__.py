"""gpuctl: turn a cloud account into a working, shared GPU platform on Kubernetes."""

__version__ = "0.1.0"
