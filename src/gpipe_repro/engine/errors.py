"""The engine's one error type for bad arguments, in the engine's own terms.

``str(err)`` reads ``"<arg>=<value> <problem>"`` with ``arg`` the engine's parameter name (``M``,
``checkpoint``, ``balance``...). A harness that exposes those parameters under other names maps
``err.arg`` to its own key in one place (``gpipe_repro.config.validate``) instead of the engine
spelling config keys.
"""

from __future__ import annotations

__all__ = ["ArgumentError"]


class ArgumentError(ValueError):
    def __init__(self, arg: str, value: object, problem: str) -> None:
        self.arg, self.value, self.problem = arg, value, problem
        super().__init__(f"{arg}={value!r} {problem}")

    def renamed(self, key: str) -> str:
        """The same message with the argument spelled ``key``."""
        return f"{key}={self.value!r} {self.problem}"
