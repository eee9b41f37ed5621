"""Admission (issue 14): a pool may hold a request whose every placement would strand room, for a bounded time.

Opt-in per pool (`NodePool.admission`, off by default). With it on, placement in the pool uses the engine's
`ours-hold` (on Kubernetes DynamicMIG its first-slot variant, policy.py); a request that it holds waits in the
pool's queue (QUEUED) until an admission pass finds a place that strands nothing, or until `held_until`
(`max_hold_minutes` after it was first held), when it is placed wherever it fits (forced). hold.py decides,
setting.py checks a pool's setting, services/admission.py records (also how each hold ended), outcomes.py reads
those ends back to price the next hold, page.py is the pools page's form.
docs/placement.md, "Admission in the portal".
"""
