"""The package's errors, apart from _lib so that _arrays (which loads no
library) raises them too."""

from typing import Any, Optional

# kve_status values of the binding's own argument checks (include/kvevict.h)
ERR_NULL, ERR_INVALID = 1, 6


class KvevictError(RuntimeError):
    """A kvevict call failed: ``status`` is the kve_status value, ``name`` its
    name (e.g. ``"KVE_ERR_RANGE"``), and the message names the argument."""

    def __init__(self, status: int, name: str, message: str, call: Optional[str]):
        super().__init__("%s%s: %s" % (call + ": " if call else "", name, message))
        self.status = status
        self.name = name
        self.message = message


class ArgumentError(KvevictError, TypeError):
    """An argument of the wrong Python type (None, or not a Context, an array,
    an integer), refused before any call, as the library refuses a NULL
    pointer: status KVE_ERR_NULL for None, KVE_ERR_INVALID for another type.
    A TypeError too."""

    def __init__(self, message: str, value: Any, call: Optional[str] = None):
        null = value is None
        super().__init__(ERR_NULL if null else ERR_INVALID,
                         "KVE_ERR_NULL" if null else "KVE_ERR_INVALID", message, call)
