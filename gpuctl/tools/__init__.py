"""The pinned external programs gpuctl drives, and their installer."""
