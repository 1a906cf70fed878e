"""Password hashing: Argon2id (RFC 9106) through argon2-cffi, stored as the PHC string
(`$argon2id$v=19$m=…,t=…,p=…$salt$hash`), so a hash made under older parameters still
verifies and is replaced at the next successful sign-in.

Each hash or verify costs ~50 ms of CPU and 19 MiB: callers run it off the event loop
(FastAPI's threadpool), and never inside a database transaction.
"""

from __future__ import annotations

import secrets
from functools import lru_cache

from argon2 import PasswordHasher, Type
from argon2.exceptions import InvalidHashError, VerificationError

from app.accounts import AccountError

MIN_CHARS = 10
MAX_CHARS = 1024  # Argon2 takes any length; this bounds the work one request can ask for

# OWASP Password Storage Cheat Sheet's first Argon2id configuration: m=19 MiB, t=2, p=1
# (~50 ms on one core here). Memory per concurrent sign-in is m, so the threadpool's 40
# threads cost at most ~760 MiB.
_hasher = PasswordHasher(time_cost=2, memory_cost=19456, parallelism=1, hash_len=32, salt_len=16, type=Type.ID)


class BadPassword(AccountError):
    """A new password too short or too long (HTTP 400)."""


def check(password: str) -> str:
    """The password if it may be set, else BadPassword saying why."""
    if not isinstance(password, str):
        raise BadPassword("the password must be a string")
    if len(password) < MIN_CHARS:
        raise BadPassword(f"the password needs at least {MIN_CHARS} characters")
    if len(password) > MAX_CHARS:
        raise BadPassword(f"the password may have at most {MAX_CHARS} characters")
    return password


def hash_password(password: str) -> str:
    return _hasher.hash(check(password))


@lru_cache
def _dummy() -> str:
    return _hasher.hash(secrets.token_urlsafe(16))


def verify(stored: str | None, password: str) -> bool:
    """Whether `password` matches the stored hash, in the hash's own constant time. With no
    stored hash (no such user), a verify against a dummy hash of the same cost runs anyway,
    so the time taken does not say which emails have accounts."""
    if not isinstance(password, str) or len(password) > MAX_CHARS:
        password = ""  # still verified, still slow: the length alone must not answer early
    try:
        return _hasher.verify(stored or _dummy(), password) and stored is not None
    except (VerificationError, InvalidHashError):
        return False


def upgraded(stored: str, password: str) -> str | None:
    """After a successful verify: a new hash of the same password under today's parameters
    if the stored one was made under others, else None."""
    try:
        stale = _hasher.check_needs_rehash(stored)
    except InvalidHashError:
        stale = True
    # not hash_password: a password set before today's length rules still signs in
    return _hasher.hash(password) if stale else None
