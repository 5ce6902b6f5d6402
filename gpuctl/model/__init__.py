"""The model: spec documents and their passes, GPU catalog, sharing, MIG geometry, taints, names."""
