"""The error of every save problem: a user-facing one-line message (missing, corrupt, mismatched)."""

from __future__ import annotations

from ..errors import UserError

__all__ = ["SaveError"]


class SaveError(UserError):
    """A save cannot be written or loaded; ``str(err)`` is the one line to show."""
