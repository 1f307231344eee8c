"""Code that runs inside worker processes, one per rank. It never runs in the harness process."""
