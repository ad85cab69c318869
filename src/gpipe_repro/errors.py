"""The one error type for user mistakes: its message is the one line the user sees."""


class UserError(ValueError):
    """Bad input (config value, missing dataset root, ...). Printed as one line, no traceback."""
