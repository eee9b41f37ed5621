"""The Kubernetes side of allocations, in one room.

- `kube.py`: the adapter, the only module that talks to the API server (dataclasses in and out, no ORM).
- `sync.py`: the Kubernetes backend's services: an approved request becomes a ResourceClaim and a holder pod,
  the scheduler's allocation is recorded, a release deletes them; tenant onboarding.
- `placements.py`: what the scheduler allocated, read back into SlicePlacement rows.
- `reconcile.py`: the beat pass that compares the cluster with the database and repairs drift.
- `fake_fleet.py`: fake GPU nodes and ResourceSlices in the NVIDIA DRA driver's format, for tests and benchmarks.

`allocations/services/provisioning.py` dispatches to `sync.py` when FATIA_CLUSTER_BACKEND is "kubernetes"; the
end states every backend records live in `allocations/services/lifecycle.py`.
"""
