#!/bin/sh
# The README's quick start, as `make demo` runs it: a sim cluster of two T4 nodes, each GPU shared four ways,
# a team with four of those GPUs, and a GPU job that completes in the team's namespace.
set -eu
gpuctl cluster create --cloud sim --name demo --gpu t4 --nodes 2 --slices 4
gpuctl tenant add team-a --gpus 4
kubectl -n team-a apply -f examples/gpu-job.yaml
kubectl -n team-a wait --for=condition=complete job/cuda-vectoradd --timeout=60s
kubectl -n team-a get pods -l job-name=cuda-vectoradd -o wide
