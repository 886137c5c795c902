"""Invocation parameters, which carry credentials, sealed at rest in the journal with Fernet.

Keys come from `TOOLFLEET_JOURNAL_KEYS` (`Settings.journal_keys`, comma-separated Fernet keys): the
first encrypts, every one decrypts (MultiFernet), so a key is rotated by putting the new one first
and keeping the old ones until no row needs them. Without a key the parameters are stored in clear
and the first such write of the process logs a warning. Rows written in clear stay readable once a
key is set.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from orchestrator.errors import JournalKeyError
from workers.settings import ENVIRONMENT

__all__ = ["KEYS_VARIABLE", "JournalCipher", "JournalKeyError"]

logger = logging.getLogger(__name__)

KEYS_VARIABLE = ENVIRONMENT["journal_keys"]
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
                    "base64-encoded bytes; make one with `python -c 'from cryptography.fernet import "
                    "Fernet; print(Fernet.generate_key().decode())'`)"
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


@functools.cache
def _warn_once() -> None:
    logger.warning(
        "%s is not set: the journal stores invocation parameters, credentials included, in clear",
        KEYS_VARIABLE,
    )
