"""Source errors name the spec field so status and CLI can point at it."""

from __future__ import annotations

from specdeploy.findings import Finding, Stage, error


class SourceError(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class SourceUnavailable(SourceError):
    """Transient: the Hub or the API server did not answer; retrying may succeed."""

    def finding(self, hint: str = "") -> Finding:
        """The config-unavailable finding (`hint`: the caller's way out, appended to the message)."""
        return error("config-unavailable", self.field, self.message + hint, Stage.CONFIG)


class SourceInvalid(SourceError):
    """Permanent: the config is missing or malformed; only a spec change fixes it."""

    def finding(self) -> Finding:
        """The config-invalid finding: the one way `plan -f` and the operator build it."""
        return error("config-invalid", self.field, self.message, Stage.CONFIG)
