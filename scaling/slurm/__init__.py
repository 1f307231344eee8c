"""Slurm: asking it, submitting cells as job arrays, polling where they stand, and the array
task."""
