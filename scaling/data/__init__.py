"""Real images: ``scaling make-data`` writes a deterministic ImageFolder tree of JPEGs
(:mod:`scaling.data.make`), and :func:`check_data_dir` checks a data folder before training."""

from scaling.data.check import check_data_dir
from scaling.data.make import DataSpec, make_data

__all__ = ["DataSpec", "check_data_dir", "make_data"]
