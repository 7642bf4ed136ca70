"""One exception type for every user-facing mistake: the CLI prints its message on one line, no traceback."""


class CaddtreeError(ValueError):
    """Bad input or setup: the message names the problem and the fix."""
