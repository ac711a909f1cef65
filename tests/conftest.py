"""Shared pytest configuration.

Hypothesis runs derandomized: the same examples on every machine, so CI is reproducible.
Set HYPOTHESIS_PROFILE=explore to search with fresh random examples locally.
"""

import os

import torch
from hypothesis import settings

settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("explore", deadline=None, max_examples=300)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

torch.set_num_threads(min(2, torch.get_num_threads()))
