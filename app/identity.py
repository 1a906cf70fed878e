"""The anonymous browser identity practice attempts belong to: a random id in a signed
cookie. The signing key comes from TRACEDOJO_SECRET_KEY, else a key kept in data/ so a
restart does not orphan anyone's attempts."""

from __future__ import annotations

import secrets
from functools import lru_cache
from pathlib import Path

from itsdangerous import BadSignature, Signer

from app.config import ROOT, get_settings

COOKIE = "tracedojo_id"


@lru_cache
def _signer() -> Signer:
    key = get_settings().secret_key
    if not key:
        path = Path(get_settings().secret_key_file or ROOT / "data" / "secret_key")
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(secrets.token_hex(32))
            path.chmod(0o600)
        key = path.read_text().strip()
    return Signer(key, salt="tracedojo.identity")


def new_identity() -> tuple[str, str]:
    """A fresh identity and its signed cookie value."""
    ident = secrets.token_hex(16)
    return ident, _signer().sign(ident).decode()


def identity_of(cookie: str | None) -> str | None:
    """The identity in a cookie, or None for a missing or forged one."""
    if not cookie:
        return None
    try:
        return _signer().unsign(cookie).decode()
    except BadSignature:
        return None
