"""The example's defs folder: each subfolder's defs.yaml is a Component (lakehouse/: wapflow's)."""
