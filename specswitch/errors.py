"""Errors that the CLI reports as one clear line (no traceback)."""


class UserError(Exception):
    """Bad input or an unusable environment: the message says what is wrong and what to do.

    Raised anywhere below a CLI handler; `specswitch.cli.main` prints it as
    ``specswitch: error: <message>`` and exits with status 2.
    """
