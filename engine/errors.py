"""Engine errors, each mapped to one HTTP status by the app. Messages never carry data."""

from __future__ import annotations


class PrimaError(Exception):
    status = 500

    def __init__(self, detail: str) -> None:
        super().__init__(detail)
        self.detail = detail


class QueryError(PrimaError):
    """The SQL is malformed or outside the supported surface.

    ``sqlstate``: the PostgreSQL class a wire client is told: 42601 syntax, 0A000 a
    feature Prima does not offer, 25006 a statement that would write, 42501 raw rows."""

    status = 400

    def __init__(self, detail: str, sqlstate: str = "42601") -> None:
        super().__init__(detail)
        self.sqlstate = sqlstate


UNSUPPORTED = "0A000"  # feature_not_supported
READ_ONLY = "25006"  # read_only_sql_transaction
RAW_ROWS = "42501"  # insufficient_privilege: rows are never released


class NotFound(PrimaError):
    status = 404


class Conflict(PrimaError):
    """Budget or state conflict: name taken, budget exhausted, failed build awaiting an admin."""

    status = 409


class Invalid(PrimaError):
    """A request that is well-formed JSON but not acceptable (bad metadata, missing file, limits).

    ``extra`` joins the JSON body (a refused registration's preflight, for the admin)."""

    status = 422

    def __init__(self, detail: str, extra: dict | None = None) -> None:
        super().__init__(detail)
        self.extra = extra or {}


class TooLarge(PrimaError):
    status = 413


class Unavailable(PrimaError):
    """The request could not finish now (a build runs, or it timed out; the work carries on).

    ``retry_after`` (seconds) becomes the Retry-After header; ``extra`` joins the JSON body."""

    status = 503

    def __init__(self, detail: str, retry_after: int | None = None, extra: dict | None = None) -> None:
        super().__init__(detail)
        self.retry_after = retry_after
        self.extra = extra or {}
