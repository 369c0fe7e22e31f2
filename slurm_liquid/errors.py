"""Exceptions that the command line turns into one clear message and an exit code."""


class LiquidError(Exception):
    """Something slurm-liquid could not do; the message says what and why (exit code 1)."""

    exit_code = 1


class UsageError(LiquidError):
    """Bad input from the user: a malformed file, flag or directive (exit code 2)."""

    exit_code = 2
