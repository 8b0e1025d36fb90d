"""Errors of the application client, each with a one-line message that says what to do."""

from __future__ import annotations

from topics.records import Turn


class TopicUnavailable(RuntimeError):
    """The broker does not answer, or the topic does not exist, when a client starts."""


class ConsumerClosed(RuntimeError):
    """A consumer was used after it was closed (or before it was started)."""


class PublishError(RuntimeError):
    """Turns the broker did not acknowledge; ``failed`` lists them so the caller can resend them."""

    def __init__(self, failed: list[Turn], cause: BaseException, topic: str) -> None:
        sessions = sorted({t.session_id for t in failed})
        shown = ", ".join(sessions[:3]) + (f" and {len(sessions) - 3} more" if len(sessions) > 3 else "")
        super().__init__(
            f"{len(failed)} turn(s) of session(s) {shown} were not delivered to topic {topic!r}: {cause}"
        )
        self.failed = failed
        self.cause = cause
