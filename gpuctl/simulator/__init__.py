"""The sim's runtime: kwok control plane, simulated GPU operator and node agents, sim Kueue."""
