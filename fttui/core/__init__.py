"""Core of fttui: profiles, launching, supervision, events and the results store (no torch)."""
