"""What-if for planners (issue 14): answers computed from a pool's real layouts, never from averages.

Three questions, each a pure function on the placement engine's dataclasses (allocations/mig), so tests check
them on small fleets by hand and the portal, the API, the page and the CLI share one answer:

* ``add_gpus``: if the pool gets N more GPUs of a model, what fits now, how many whole GPUs are free, how much
  of the queued and recently refused demand would be served, and the capacity in compute slices / memory slots;
* ``quota``: if a tenant's quota doubles (or is set to C/M), how much more it could hold now (bound by its
  quota or by the pool's free layouts), what becomes of its waiting requests, and what the others lose;
* ``mix``: which per-GPU layout mix serves the pool's learnt demand best (the exact offline optimum) and how
  far the current layouts are from it.

``selectors`` reads the database into these dataclasses (the only module here that imports Django models);
``page``, ``cli`` and allocations/api/whatif.py present the answers. docs/placement.md, "What-if".
"""
