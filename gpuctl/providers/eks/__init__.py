"""AWS EKS: clusters and managed GPU node groups (boto3, imported lazily), Karpenter GPU NodePools."""
