"""Utilities every layer may use: errors, output, paths, waits."""
