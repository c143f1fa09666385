"""Errors raised for bad input. Every message names the file, column or value at fault."""


class InputError(ValueError):
    """Input data (a file, a column, a value, a partition key) is unusable.

    The message always names the offending input so the user can find it.
    """


class ContractError(InputError):
    """A table does not match its contract (schema, keys or value ranges)."""


class CredentialError(RuntimeError):
    """Storage credentials are missing or expired; retrying cannot help."""
