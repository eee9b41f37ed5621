"""Which slice do I need? (issue 17): a GPU memory estimate for serving or fine-tuning a model, and the smallest
MIG profile (or share of a whole GPU) of each pool that holds it with headroom.

`known_models` is a small table of architectures, `estimate` the memory arithmetic, `fit` the choice of profile or
share, all pure Python; `pools` runs them over the pools and adds what fits there now. Formulas and sources:
docs/advisor.md.
"""
