"""Python 3.11 shim for skyrl 0.3.0: pydantic rejects `typing.TypedDict` there (skyrl/tinker/types.py).

Import this module before anything from `skyrl`; it is idempotent and a no-op on 3.12+.
"""

import sys
import typing

if sys.version_info < (3, 12):
    import typing_extensions

    typing.TypedDict = typing_extensions.TypedDict  # type: ignore[misc]
