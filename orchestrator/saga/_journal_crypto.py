"""Invocation parameters, which carry credentials, sealed at rest in the journal with Fernet.

Keys come from `TOOLFLEET_JOURNAL_KEYS` (`Settings.journal_keys`, comma-separated Fernet keys): the
first encrypts, every one decrypts (MultiFernet), so a key is rotated by putting the new one first
and keeping the old ones until no row needs them. Without a key the parameters are stored in clear
and the process's first such write logs a warning, once whatever its threads; a process that writes
no parameters (`toolfleet tools`, `show`, `worker`, ...) never does. Rows written in clear stay
readable once a key is set.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from orchestrator.errors import JournalKeyError
from workers.settings import ENVIRONMENT

__all__ = ["KEYS_VARIABLE", "MAKE_KEY", "JournalCipher", "JournalKeyError"]

logger = logging.getLogger(__name__)

KEYS_VARIABLE = ENVIRONMENT["journal_keys"]
# How to make a key, as messages show it.
MAKE_KEY = "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())'"
# A sealed value starts with this; clear JSON starts with "{".
_PREFIX = "fernet:"


def _parse_keys(keys: str | Sequence[str]) -> list[str]:
    items = keys.split(",") if isinstance(keys, str) else list(keys)
    return [item.strip() for item in items if item.strip()]


class JournalCipher:
    """Seals and opens the `invocation_json` column."""

    def __init__(self, keys: str | Sequence[str]) -> None:
        parsed = _parse_keys(keys)
        fernets: list[Fernet] = []
        for position, key in enumerate(parsed, start=1):
            try:
                fernets.append(Fernet(key))
            except (ValueError, TypeError):
                raise JournalKeyError(
                    f"{KEYS_VARIABLE}: key {position} of {len(parsed)} is not a Fernet key (32 url-safe "
                    f"base64-encoded bytes; make one with `{MAKE_KEY}`)"
                ) from None
        self._fernet = MultiFernet(fernets) if fernets else None
        self.key_count = len(fernets)

    def seal(self, text: str) -> str:
        """`text` encrypted with the first key; `text` itself when there is no key."""
        if self._fernet is None:
            _warn_once()
            return text
        return _PREFIX + self._fernet.encrypt(text.encode()).decode("ascii")

    def open(self, stored: str, *, invocation_id: str) -> str:
        """The clear text of a stored value, sealed or not; a clear error when no key opens it."""
        if not stored.startswith(_PREFIX):
            return stored
        if self._fernet is None:
            raise JournalKeyError(
                f"invocation {invocation_id}: its parameters are encrypted and {KEYS_VARIABLE} is not set; "
                "set it to the key that wrote them"
            )
        try:
            return self._fernet.decrypt(stored[len(_PREFIX) :].encode("ascii")).decode()
        except (InvalidToken, UnicodeError):
            raise JournalKeyError(
                f"invocation {invocation_id}: none of the {self.key_count} keys in {KEYS_VARIABLE} "
                "decrypts its parameters; add the key that wrote them (after the current one, to rotate)"
            ) from None


class _WarnOnce:
    """Logs that the journal stores parameters in clear the first time a process does, whatever its
    threads: the check and the mark are one step under a lock, so writers racing through their first
    write (a service's concurrent invocations) log it once between them."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._warned = False

    def __call__(self) -> None:
        with self._lock:
            if self._warned:
                return
            self._warned = True
        logger.warning(
            "%s is not set: the journal stores invocation parameters, credentials included, in clear; "
            "set it to a Fernet key (%s)",
            KEYS_VARIABLE,
            MAKE_KEY,
        )

    def cache_clear(self) -> None:
        """Forget that this process warned (for tests, which each want to see the first warning)."""
        with self._lock:
            self._warned = False


_warn_once = _WarnOnce()
