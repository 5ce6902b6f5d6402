"""GPU metrics: Prometheus's DCGM series per device (gpu_metrics), read by `gpuctl top` (top) and `gpuctl advise`
(advise); the Grafana dashboard `gpuctl render --out` writes over the same series (dashboard)."""
