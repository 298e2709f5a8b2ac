"""Experiments made of runs: the probe (the exact OOM boundary of one setting) and sweeps (a grid
of settings, one run per cell)."""
