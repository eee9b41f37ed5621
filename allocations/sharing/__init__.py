"""Sharing whole GPUs without MIG (issue 13): the non-MIG GPU catalog, quota units, isolation labels and packing.

Pure logic only (no ORM, no Django): the portal's services and pages, the benchmarks and the Kubernetes side read
these modules.
"""
