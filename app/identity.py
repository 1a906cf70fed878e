"""The anonymous browser identity practice attempts belong to: a random id in a signed
cookie. The signing key comes from TRACEDOJO_SECRET_KEY, else a key kept in data/ so a
restart does not orphan anyone's attempts."""

from __future__ import annotations

import os
import secrets
from functools import lru_cache
from pathlib import Path

from itsdangerous import BadSignature, Signer

from app.config import get_settings

COOKIE = "tracedojo_id"


@lru_cache
def _signer() -> Signer:
    key = get_settings().secret_key
    if not key:
        key = _key_file(Path(get_settings().secret_key_file or get_settings().data_dir / "secret_key"))
    return Signer(key, salt="tracedojo.identity")


def _key_file(path: Path) -> str:
    """The key kept in `path`, made once whichever worker gets there first: each writes
    its own candidate and links it into place; a link fails where the file exists, so every
    worker ends up reading the one key that won (never a half-written file)."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}")
        tmp.write_text(secrets.token_hex(32))
        tmp.chmod(0o600)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip()


def server_key() -> bytes:
    """The server's secret key, for other MACs than the cookie's (app/sharing.py): the
    signer's own copy, so one cache holds it and clearing `_signer` clears both."""
    return _signer().secret_keys[-1]


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
