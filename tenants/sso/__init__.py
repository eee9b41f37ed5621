"""Single sign-on: OpenID Connect (oidc.py, discovery.py), an authenticating proxy (proxy.py), and the services that
turn an identity and its groups into a portal user with tenant memberships (services.py)."""
