"""Namespace of the exception classes tool tasks raise, one per tool exception type name.

They live in a real module so that Celery can pickle them and keeps their own names: Flower then
shows a failed call as, say, `InsufficientFunds('...')`. A prefork pool's parent process unpickles
what its children raise, so a class is created here on first lookup by name, in any process.
"""

from typing import Any


def __getattr__(name: str) -> Any:
    if name.startswith("__") or not name.isidentifier():
        raise AttributeError(name)
    from workers.tasks import failure_type

    return failure_type(name)
