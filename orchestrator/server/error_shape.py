"""The service's errors in OpenAI's error shape: `{"error": {"message", "type", "param", "code"}}`.

`orchestrator.errors.ApiError` is what a route raises for a request it refuses; its status picks the
OpenAI `type` and `code` a client library maps to its own exception (`openai.BadRequestError`,
`AuthenticationError`, `NotFoundError`, `RateLimitError`, ...). An unexpected exception is answered
500 with the invocation's id to look for in the logs, never with its text or traceback.
"""

from __future__ import annotations

import logging
from typing import Any

from orchestrator.errors import ApiError, ModelError

log = logging.getLogger(__name__)

__all__ = ["api_error_body", "error_body", "failure_text", "invocation_failure"]

# status -> (OpenAI error type, code)
_KINDS: dict[int, tuple[str, str | None]] = {
    400: ("invalid_request_error", None),
    401: ("invalid_request_error", "invalid_api_key"),
    404: ("invalid_request_error", "model_not_found"),
    405: ("invalid_request_error", "method_not_allowed"),
    409: ("invalid_request_error", "conflict"),
    413: ("invalid_request_error", "request_too_large"),
    422: ("invalid_request_error", None),
    429: ("rate_limit_error", "rate_limit_exceeded"),
    500: ("server_error", None),
    503: ("server_error", "service_unavailable"),
}


def api_error_body(error: ApiError) -> dict[str, Any]:
    """OpenAI's error object for a refused request."""
    return error_body(error.status, error.message, param=error.param, code=error.code)


def error_body(
    status: int, message: str, *, param: str | None = None, code: str | None = None
) -> dict[str, Any]:
    """OpenAI's error object for `status`."""
    kind, default_code = _KINDS.get(
        status, ("server_error" if status >= 500 else "invalid_request_error", None)
    )
    if code == "insufficient_quota":  # OpenAI's type for an account out of credit is its code too
        kind = code
    return {"error": {"message": message, "type": kind, "param": param, "code": code or default_code}}


def invocation_failure(exc: Exception, invocation_id: str) -> ApiError:
    """What an invocation's failure is to a client, logged once here: its model failing is a 502,
    anything else a 500 naming the invocation, never the error's details (the log has them)."""
    if isinstance(exc, ModelError):
        log.warning("invocation %s: the agent's model failed: %s", invocation_id, exc)
        return ApiError(502, f"the agent's model failed (invocation {invocation_id})")
    log.error("invocation %s failed", invocation_id, exc_info=exc)
    return ApiError(500, failure_text(invocation_id))


def failure_text(invocation_id: str) -> str:
    """What a client is told of an invocation that failed (the service's log has why)."""
    return f"the invocation {invocation_id} failed; the service's log has the details"
