"""`gpuctl doctor`: what is wrong with a running GPU platform, why, and the safe repairs (issue 31). findings.py
holds the checks, each over the cluster's objects as JSON; doctor.py reads them and repairs."""
