"""WSGI entry point (gunicorn portal.wsgi)."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

django_application = get_wsgi_application()

# The node agents' queued telemetry (the one hot endpoint) skips Django's middleware and URL resolution; every
# other request is Django's as before (allocations/nodeagent/api/lean.py).
from allocations.nodeagent.api.lean import LeanTelemetry  # noqa: E402  (needs the settings set up above)

application = LeanTelemetry(django_application)
