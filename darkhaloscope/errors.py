"""Errors raised for bad input. Every message names the file, column or value at fault."""


class InputError(ValueError):
    """Input data (a file, a column, a value, a partition key) is unusable.

    The message always names the offending input so the user can find it.
    """


class CredentialError(RuntimeError):
    """Storage credentials are missing or expired; retrying cannot help."""


class StorageError(RuntimeError):
    """The lake's storage refused an operation for a reason that persists: the path is not a folder
    (a file is in the way), the file system is read-only, or permission is denied. Retrying cannot help."""


#: Errors that no retry layer retries: the same call would fail the same way.
PERMANENT_ERRORS: tuple[type[BaseException], ...] = (InputError, CredentialError, StorageError)
