"""Test beds: real services (installed from PyPI into cached virtualenvs) backed by gpuctl's sim clusters."""
