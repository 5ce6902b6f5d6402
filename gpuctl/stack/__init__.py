"""The GPU stack on a cluster: NFD and the NVIDIA GPU Operator through Helm, and its config."""
