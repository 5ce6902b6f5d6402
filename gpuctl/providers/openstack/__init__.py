"""OpenStack Magnum: clusters and GPU node groups through openstacksdk's authenticated proxy."""

from gpuctl.model.capabilities import Capabilities

# Clusters get nvidia_gpu_enabled=true (as at CERN), whose node images carry the NVIDIA driver and container
# toolkit: the GPU Operator must not install them again.
CAPABILITIES = Capabilities(default_charts="upstream", ships_driver=True, flavor=True)
