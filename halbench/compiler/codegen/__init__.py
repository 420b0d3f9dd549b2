"""Per-target code generation: one executable per dispatch (local.py: local-v1 NumPy kernels)."""
