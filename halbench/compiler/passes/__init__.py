"""The compiler's passes: pure functions ``Graph -> Graph``, one per file (see pipeline.py)."""
