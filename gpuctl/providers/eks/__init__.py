"""AWS EKS: clusters and managed GPU node groups (boto3, imported lazily), Karpenter GPU NodePools."""

from gpuctl.model.capabilities import Capabilities

# The NVIDIA AMI types (AL2023/Bottlerocket NVIDIA, AL2 GPU) ship driver and toolkit.
CAPABILITIES = Capabilities(default_charts="upstream", ships_driver=True, karpenter=True, instance_type=True)
