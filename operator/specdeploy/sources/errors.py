"""Source errors name the spec field so status and CLI can point at it."""


class SourceError(Exception):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


class SourceUnavailable(SourceError):
    """Transient: the Hub or the API server did not answer; retrying may succeed."""


class SourceInvalid(SourceError):
    """Permanent: the config is missing or malformed; only a spec change fixes it."""
