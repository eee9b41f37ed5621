"""MIG catalog, layout validity, placement policies, what-if, reconfiguration and defrag planners.

Pure Python: nothing here imports Django, so the portal, the workers and the benchmark share it.
"""
