"""Workloads that use a request's claims (issue 17, "manifests that just work").

`target` says where a request's claims are (namespace, claim names, the pool's tolerations and node selector);
`manifests` writes ready-to-apply Pods, Jobs, Deployments, notebooks and vLLM servers for it; `attach` adds the
claim references to a manifest the user already has; `documents` reads and writes multi-document YAML. All four
are pure Python (no Django): `from_allocation` is the one place that reads a request.
"""
