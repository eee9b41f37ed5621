"""Domain errors raised by services; the API maps them to HTTP status codes in one place."""

from __future__ import annotations


class DomainError(Exception):
    """Base of every business-rule failure. `status` is the HTTP status the API answers with."""

    status = 400
    code = "invalid"

    def __init__(self, message: str, *, field: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.field = field

    def as_dict(self) -> dict[str, list[str]]:
        return {self.field or "detail": [self.message]}


class InvalidInput(DomainError):
    """Input that breaks a rule only the service can check (unknown profile, lease past policy)."""

    def __init__(self, errors: dict[str, list[str]]) -> None:
        first = next(iter(errors.items()))
        super().__init__(first[1][0], field=first[0])
        self.errors = errors

    def as_dict(self) -> dict[str, list[str]]:
        return self.errors


class InvalidTransition(DomainError):
    status = 409
    code = "invalid_transition"

    def __init__(self, *, current: str, target: str, message: str = "") -> None:
        # `message`: what to tell a person where "Cannot move from A to B" would say little.
        super().__init__(message or f"Cannot move from {current} to {target}.")
        self.current = current
        self.target = target


class QuotaExceeded(DomainError):
    status = 409
    code = "quota_exceeded"


class IdempotencyConflict(DomainError):
    status = 409
    code = "idempotency_key_reused"


class NotAllowed(DomainError):
    """The actor can see the object but may not do this to it (maps to 403)."""

    status = 403
    code = "permission_denied"
