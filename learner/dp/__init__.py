"""Differentially private SGD: settings (:mod:`.config`, no torch), the private step
(:mod:`.sgd`: per-sample clipping and Gaussian noise) and the accountant
(:mod:`.accounting`). Submodules are imported where used, so reading the
settings never loads torch.
"""
