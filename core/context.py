"""Per-request context (request id, actor) that audit rows pick up without threading it
through every call."""

from contextvars import ContextVar

request_id_var: ContextVar[str] = ContextVar("hangar_request_id", default="")


def current_request_id() -> str:
    return request_id_var.get()
