"""A submitted practice report, shared by its owner through a revocable link.

The link is `/shared/<public id>.<mac>`, the mac an HMAC-SHA256 under the server's secret
key (app.identity.server_key) of the attempt's public id and a random nonce kept in
`attempts.share_nonce`. So:
- the owner sees the same link again (the nonce stays until they change it);
- a copy of the database alone opens nothing: it holds the nonce, never the key;
- a revoke clears the nonce and a new link draws a new one: every earlier link dies.
The public id names the attempt for one indexed lookup and opens nothing by itself: every
other route of an attempt also wants its owner's identity cookie.

Whoever holds the link reads the report (`shown`): the score, the evidence in the owner's
words, the model answer, what was missed, the instance (public once submitted). Never the
owner's identity (the browser's cookie id) nor the owner's own fields (the link's state,
when the attempt was made); the attempt's public id is in the link the reader already has.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
from datetime import datetime, timezone

from sqlalchemy import select

from app import practice
from app.db.base import Store
from app.db.models import Attempt
from app.identity import server_key

# Bound into every mac, so no other MAC the server's key makes can pass for a link.
PURPOSE = b"tracedojo.practice-share.v1"
# public id (16 hex, app.practice.create) "." 43 characters of base64url SHA-256
TOKEN = re.compile(r"[0-9a-f]{1,32}\.[A-Za-z0-9_-]{43}")
# What the page of a shared report says for a forged, revoked or replaced link alike:
# the answer must not tell a guess at a public id whether it named an attempt.
GONE = "no shared report at this link: its owner may have revoked it or made a new one"


class NotShared(practice.NoAttempt):
    """No report behind this link (HTTP 404)."""


def now() -> datetime:
    return datetime.now(timezone.utc)


def _mac(public_id: str, nonce: str) -> str:
    msg = b"\0".join((PURPOSE, public_id.encode(), nonce.encode()))
    digest = hmac.new(server_key(), msg, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def token(a: Attempt) -> str | None:
    """The link's token while the attempt is shared, else None."""
    return f"{a.public_id}.{_mac(a.public_id, a.share_nonce)}" if a.share_nonce else None


def url(a: Attempt) -> str | None:
    t = token(a)
    return f"/shared/{t}" if t else None


def _aware(t: datetime | None) -> datetime | None:
    return t.replace(tzinfo=timezone.utc) if t is not None and t.tzinfo is None else t


def state(a: Attempt) -> dict:
    """What the owner sees of the link: it, and since when it has been the link."""
    shared_at = _aware(a.shared_at) if a.share_nonce else None
    return {"share_url": url(a), "shared_at": shared_at.isoformat() if shared_at else None}


def share(store: Store, owner: str, public_id: str) -> Attempt:
    """A new link to this browser's submitted attempt; the one before (if any) stops
    working. Asked twice, it makes two links, and only the second opens the report."""
    with store.write() as db:
        a = practice._find(db, owner, public_id, lock=True)
        if a.submitted_at is None:
            raise practice.NotSubmitted("this attempt is not submitted yet: submit it, then share its report")
        # 128 bits: the mac covers it, so its secrecy is not what guards the link
        a.share_nonce, a.shared_at = secrets.token_hex(16), now()
    return a


def revoke(store: Store, owner: str, public_id: str) -> Attempt:
    """Every link to this attempt stops working. Revoking an unshared attempt is a no-op."""
    with store.write() as db:
        a = practice._find(db, owner, public_id, lock=True)
        a.share_nonce, a.shared_at = None, None
    return a


def opened(store: Store, link_token: str) -> Attempt:
    """The attempt behind a link, or NotShared for a forged, revoked or replaced one."""
    if not TOKEN.fullmatch(link_token or ""):
        raise NotShared(GONE)
    public_id, mac = link_token.split(".")
    with store.read() as db:
        a = db.scalar(select(Attempt).where(Attempt.public_id == public_id))
    if a is None or not a.share_nonce or a.submitted_at is None \
            or not hmac.compare_digest(_mac(public_id, a.share_nonce), mac):
        raise NotShared(GONE)
    return a


# The owner's own fields, left out of what a link shows.
PRIVATE = ("id", "share_url", "shared_at", "created_at", "updated_at")


def shown(a: Attempt) -> dict:
    """The submitted attempt as anyone with its link (or a round's reviewers, once the
    candidate attached it) may see it: the report, not who wrote it."""
    return {k: v for k, v in practice.public(a).items() if k not in PRIVATE}
