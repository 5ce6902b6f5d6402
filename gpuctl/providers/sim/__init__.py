"""The `sim` provider: a real kube-apiserver + etcd with kwok's fake GPU nodes, on loopback."""
