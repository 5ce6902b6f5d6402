"""`apply -f` and `plan`: one list of steps (steps.py), acted on by apply.py and observed by plan.py.

The cloud's steps (cloud.py: the cluster and its node groups; kubeconfig.py) come first; then the flow reads the
cluster once (steps.read_cluster: a Cluster value); then the cluster's steps, one module per concern, each step's
observe and act side by side: nodes.py (labels, taints, sharing), gpu_config.py (the GPU configs and the
device-plugin restart), gpu_stack.py (the Helm releases, another's ClusterPolicy, Kueue), mig.py, capacity.py,
tenants.py (thin: the work lives in ops.tenancy), validation.py. diffs.py tells what a step would change."""
