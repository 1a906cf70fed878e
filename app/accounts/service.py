"""Staff accounts: users in teams with a role, signing in and out, server-side sessions,
invites, and who is in a team. Domain only: the web layer and the command line call
these; nothing here knows about HTTP.

Sessions. The browser holds a random 32-byte token; `staff_sessions` holds its SHA-256,
so a copy of the database signs no one in. A session ends at logout (revoked server-side:
the cookie's value is worthless after, even replayed), after 12 hours unused, 7 days after
sign-in whatever happens, and when its user is disabled. Use is recorded at most once per
5 minutes, so an ordinary page view reads and does not write.

Sign-in attempts. Each attempt is recorded as a failure in `login_failures` before the
password is checked, and the record is removed if it succeeds: of many attempts racing
in parallel, each one counts, whatever worker or host it reached. Past 5 failures for one
email or 30 from one address within 15 minutes, attempts are refused (TooManyAttempts,
with the seconds until the oldest counted failure leaves the window) before any password
is checked. A wrong password, an unknown email and a disabled account get the same
answer, in about the same time (passwords.verify).

Invites. A link with a random token (stored hashed), good for 7 days and for one account:
accepting it marks it used with a conditional UPDATE (`used_at IS NULL`) in the same
transaction that creates the account, so of two racing accepts exactly one succeeds. An
invite to an email that has an account already adds the team to that account, and only
with that account's password (an invite link must not reset anyone's password).
"""

from __future__ import annotations

import hashlib
import math
import re
import secrets
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta, timezone

from sqlalchemy import delete, or_, select, text, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.accounts import (AccessDenied, AccountError, InviteExpired, InviteUsed, LoginFailed, NoInvite,
                          NotSignedIn, Staff, TooManyAttempts, passwords)
from app.db.base import Store, StoreUnavailable, sqlite_path, store_for
from app.db.staff import ROLES, Invite, LoginFailure, Membership, StaffSession, Team, User

SESSION_IDLE = timedelta(hours=12)
SESSION_ABSOLUTE = timedelta(days=7)
TOUCH_EVERY = timedelta(minutes=5)
INVITE_TTL = timedelta(days=7)
FAILURE_WINDOW = timedelta(minutes=15)
MAX_FAILURES_PER_EMAIL = 5
MAX_FAILURES_PER_IP = 30

MAX_EMAIL_CHARS = 254  # RFC 5321's path limit, and the column's
EMAIL = re.compile(r"[^@\s]{1,64}@[^@\s.]+(\.[^@\s.]+)+")
SLUG = re.compile(r"[a-z0-9][a-z0-9-]{0,63}")
LOGIN_FAILED = "wrong email or password"


def now() -> datetime:
    return datetime.now(timezone.utc)


def _utc(t: datetime) -> datetime:
    """SQLite gives back naive datetimes; every time stored here is UTC."""
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _clip(value, n: int = 60) -> str:
    s = str(value)
    return s if len(s) <= n else s[:n - 1] + "…"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# -- validation ----------------------------------------------------------------------------

def check_email(email) -> str:
    """The email, lower-cased and stripped, or AccountError."""
    if not isinstance(email, str):
        raise AccountError("the email must be a string")
    e = email.strip().lower()
    if len(e) > MAX_EMAIL_CHARS or not EMAIL.fullmatch(e) or any(ord(c) < 32 or ord(c) == 127 for c in e):
        raise AccountError(f"not an email address: {_clip(email)!r}")
    return e


def check_role(role) -> str:
    if role not in ROLES:
        raise AccountError(f"unknown role {_clip(role)!r}; valid: {', '.join(ROLES)}")
    return role


def check_slug(slug) -> str:
    """A team's slug, lower-cased: a letter or digit, then letters, digits and hyphens (64 at most)."""
    s = slug.strip().lower() if isinstance(slug, str) else ""
    if not SLUG.fullmatch(s):
        raise AccountError(f"bad team {_clip(slug)!r}: use 1-64 letters, digits and hyphens, starting with a "
                           f"letter or digit")
    return s


def check_password(password) -> str:
    return passwords.check(password)


# -- who someone is ------------------------------------------------------------------------

def _staff(db: Session, user: User) -> Staff:
    rows = db.execute(select(Membership.team_id, Membership.role, Team.slug)
                      .join(Team, Team.id == Membership.team_id).where(Membership.user_id == user.id)).all()
    return Staff(user.id, user.email, {r.team_id: r.role for r in rows}, {r.team_id: r.slug for r in rows})


def describe(staff: Staff) -> dict:
    """What a signed-in person may see of themselves: `{email, teams: [{slug, role}]}`."""
    return {"email": staff.email,
            "teams": sorted(({"slug": staff.teams[t], "role": r} for t, r in staff.roles.items()),
                            key=lambda x: x["slug"])}


def require(by: Staff | None, slug: str, *roles: str) -> int:
    """The id of team `slug` if `by` holds one of `roles` in it (any role if none given),
    else AccessDenied (NotSignedIn for nobody). A team one is not in is refused the same
    way as one that does not exist: the answer does not say which slugs are taken."""
    if by is None:
        raise NotSignedIn("sign in first")
    tid = by.team_id(slug) if isinstance(slug, str) else None
    if tid is None or (roles and not by.is_(tid, *roles)):
        who = " or ".join(f"{r}s" for r in roles) if roles else "members"
        raise AccessDenied(f"only {who} of team {_clip(slug, 64)!r} may do this")
    return tid


# -- users and teams -----------------------------------------------------------------------

@dataclass(frozen=True)
class UserAdded(Staff):
    """add_user's answer: the person as they are now, and what this call changed."""

    changes: tuple[str, ...] = ()


def _get_or_create(db: Session, model, where: dict, **values):
    """The row matching `where`, made with `values` if missing; (row, created). A racing
    creator that commits first wins; its row is returned instead (PostgreSQL; SQLite's
    write lock serializes the two)."""
    row = db.scalar(select(model).filter_by(**where))
    if row is not None:
        return row, False
    try:
        with db.begin_nested():
            row = model(**where, **values)
            db.add(row)
        return row, True
    except IntegrityError:
        return db.scalar(select(model).filter_by(**where)), False


def add_user(store: Store, email: str, password: str | None, role: str, team_slug: str) -> Staff:
    """Put `email` in team `team_slug` (made if missing, named after its slug) as `role`:
    a new account (which needs a password), or a team or role more for an existing one,
    whose password changes only if one is given. Returns a UserAdded naming the changes."""
    email, role, slug = check_email(email), check_role(role), check_slug(team_slug)
    new_hash = passwords.hash_password(password) if password is not None else None  # outside the write lock
    t = now()
    with store.write() as db:
        changes = []
        team, made = _get_or_create(db, Team, {"slug": slug}, name=slug, created_at=t)
        if made:
            changes.append(f"new team {slug}")
        user = db.scalar(select(User).where(User.email == email))
        if user is None:
            if new_hash is None:
                raise AccountError(f"{email} has no account yet: a new account needs a password")
            user, made = _get_or_create(db, User, {"email": email}, password_hash=new_hash, created_at=t)
            changes.append(f"new user {email}" if made else "password set")
            if not made:
                user.password_hash = new_hash
        elif new_hash is not None:
            user.password_hash = new_hash
            changes.append("password set")
        m, made = _get_or_create(db, Membership, {"user_id": user.id, "team_id": team.id}, role=role, created_at=t)
        if made:
            changes.append(f"joined {slug}")
        elif m.role != role:
            changes.append(f"was {m.role}")
            m.role = role
        db.flush()
        staff = _staff(db, user)
    return UserAdded(**asdict(staff), changes=tuple(changes))


def has_account(store: Store, email: str) -> bool:
    email = check_email(email)
    with store.read() as db:
        return db.scalar(select(User.id).where(User.email == email)) is not None


def disable_user(store: Store, email: str) -> bool:
    """Disable an account and end its sessions; False if there is no such account."""
    email = check_email(email)
    with store.write() as db:
        user = db.scalar(select(User).where(User.email == email))
        if user is None:
            return False
        user.disabled_at = user.disabled_at or now()
        _revoke(db, StaffSession.user_id == user.id)
    return True


# -- signing in ----------------------------------------------------------------------------

def _serialize(db: Session, email: str) -> None:
    """On PostgreSQL, one attempt per email at a time holds its count (SQLite's write lock
    already serializes every write)."""
    if db.get_bind().dialect.name == "postgresql":
        key = int.from_bytes(hashlib.sha256(b"tracedojo.login:" + email.encode()).digest()[:8], "big", signed=True)
        db.execute(text("SELECT pg_advisory_xact_lock(:k)"), {"k": key})


def _retry_after(db: Session, email: str, ip: str, t: datetime) -> int | None:
    """Seconds until a new attempt for `email` from `ip` may be made, or None if now."""
    wait = None
    for column, value, limit in ((LoginFailure.email, email, MAX_FAILURES_PER_EMAIL),
                                 (LoginFailure.ip, ip, MAX_FAILURES_PER_IP)):
        if not value:
            continue
        latest = db.scalars(select(LoginFailure.at).where(column == value, LoginFailure.at >= t - FAILURE_WINDOW)
                            .order_by(LoginFailure.at.desc()).limit(limit)).all()
        if len(latest) >= limit:
            # once the limit-th most recent failure leaves the window, limit - 1 remain
            s = max(1, math.ceil((_utc(latest[-1]) + FAILURE_WINDOW - t).total_seconds()))
            wait = max(wait or 0, s)
    return wait


def _attempt(store: Store, email: str, ip: str) -> User | None:
    """Before a password is checked: refuse if too many have failed lately, else record this
    attempt as a failure (removed when it succeeds). The account, if there is one."""
    t = now()
    with store.write() as db:
        _serialize(db, email)
        db.execute(delete(LoginFailure).where(LoginFailure.at < t - FAILURE_WINDOW))  # old rows, while here
        wait = _retry_after(db, email, ip, t)
        if wait is None:
            db.add(LoginFailure(email=email, ip=ip, at=t))
            user = db.scalar(select(User).where(User.email == email))
    if wait is not None:
        raise TooManyAttempts(f"too many failed sign-ins; try again in {math.ceil(wait / 60)} min", wait)
    return user


def _new_session(db: Session, user_id: int, t: datetime) -> str:
    token = secrets.token_urlsafe(32)
    db.add(StaffSession(token_hash=token_hash(token), user_id=user_id, created_at=t, last_seen_at=t,
                        expires_at=t + SESSION_ABSOLUTE))
    return token


def login(store: Store, email: str, password: str, ip: str) -> tuple[str, Staff]:
    """A new session for `email` if `password` is its password: (cookie token, Staff).
    LoginFailed (same words for an unknown email, a wrong password, a disabled account) or
    TooManyAttempts. Costs one Argon2 verify: call it off the event loop."""
    email = (email.strip().lower() if isinstance(email, str) else "")[:MAX_EMAIL_CHARS]
    ip = (ip or "")[:64]
    user = _attempt(store, email, ip)
    ok = passwords.verify(user.password_hash if user else None, password)
    if not ok or user is None or user.disabled_at is not None:
        raise LoginFailed(LOGIN_FAILED)
    new_hash = passwords.upgraded(user.password_hash, password)
    t = now()
    with store.write() as db:
        db.execute(delete(LoginFailure).where(LoginFailure.email == email))  # this attempt's record too
        # sessions past either expiry, while here (revoked ones go when they expire)
        db.execute(delete(StaffSession).where(or_(StaffSession.expires_at < t,
                                                  StaffSession.last_seen_at < t - SESSION_IDLE)))
        if new_hash:
            db.execute(update(User).where(User.id == user.id, User.password_hash == user.password_hash)
                       .values(password_hash=new_hash))
        token = _new_session(db, user.id, t)
        staff = _staff(db, user)
    return token, staff


def staff_for_token(store: Store, token: str | None) -> Staff | None:
    """Who holds this session token, or None (unknown, expired, revoked, disabled user)."""
    if not token or not isinstance(token, str) or len(token) > 128:
        return None
    t = now()
    with store.read() as db:
        row = db.execute(select(StaffSession.id, StaffSession.last_seen_at, User)
                         .join(User, User.id == StaffSession.user_id)
                         .where(StaffSession.token_hash == token_hash(token), StaffSession.revoked_at.is_(None),
                                StaffSession.expires_at > t, StaffSession.last_seen_at > t - SESSION_IDLE,
                                User.disabled_at.is_(None))).first()
        if row is None:
            return None
        staff = _staff(db, row.User)
    if t - _utc(row.last_seen_at) >= TOUCH_EVERY:
        try:
            # on SQLite a quarter-second lock wait, not the busy timeout: this write only
            # slides the idle expiry, and the next page view tries again
            quick = store_for(store.url, 0.25) if sqlite_path(store.url) else store
            with quick.write() as db:
                db.execute(update(StaffSession).where(StaffSession.id == row.id, StaffSession.last_seen_at < t)
                           .values(last_seen_at=t))
        except StoreUnavailable:
            pass
    return staff


def _revoke(db: Session, where) -> int:
    return db.execute(update(StaffSession).where(where, StaffSession.revoked_at.is_(None))
                      .values(revoked_at=now())).rowcount


def logout(store: Store, token: str | None) -> None:
    """End this session on the server (nothing happens for an unknown token)."""
    if token and isinstance(token, str) and len(token) <= 128:
        with store.write() as db:
            _revoke(db, StaffSession.token_hash == token_hash(token))


def revoke_sessions(store: Store, user_id: int) -> int:
    """End every session of a user (all browsers); how many were live."""
    with store.write() as db:
        return _revoke(db, StaffSession.user_id == user_id)


# -- invites -------------------------------------------------------------------------------

def invite(store: Store, by: Staff, team_id: int, email: str, role: str) -> str:
    """A single-use invite to team `team_id` as `role`, good for 7 days: the token for its
    link (shown once: only its hash is kept). Admins of that team only."""
    if not by.is_(team_id, "admin"):
        raise AccessDenied("only the team's admins may invite")
    email, role = check_email(email), check_role(role)
    token = secrets.token_urlsafe(32)
    t = now()
    with store.write() as db:
        # again in the transaction: the Staff may be older than a change of role
        if db.scalar(select(Membership.role).where(Membership.user_id == by.user_id,
                                                   Membership.team_id == team_id)) != "admin":
            raise AccessDenied("only the team's admins may invite")
        have = db.scalar(select(Membership.role).join(User, User.id == Membership.user_id)
                         .where(User.email == email, Membership.team_id == team_id))
        if have:
            raise AccountError(f"{email} is in this team already, as {have}")
        _close_invites(db, team_id, email)  # the newest link is the one that works
        db.add(Invite(token_hash=token_hash(token), team_id=team_id, email=email, role=role, created_by=by.user_id,
                      created_at=t, expires_at=t + INVITE_TTL))
    return token


def _close_invites(db: Session, team_id: int, email: str) -> None:
    """Open invites of one email to one team go: replaced by a newer one, or done with."""
    db.execute(delete(Invite).where(Invite.team_id == team_id, Invite.email == email, Invite.used_at.is_(None)))


def _open_invite(db: Session, token: str) -> Invite:
    inv = db.scalar(select(Invite).where(Invite.token_hash == token_hash(token))) \
        if isinstance(token, str) and len(token) <= 128 else None
    if inv is None:
        raise NoInvite("no such invite: check the link, or ask the team's admin for a new one")
    if inv.used_at is not None:
        raise InviteUsed("this invite was accepted already: sign in at /login, or ask for a new invite")
    if _utc(inv.expires_at) <= now():
        raise InviteExpired("this invite has expired: ask the team's admin for a new one")
    return inv


def invite_info(store: Store, token: str) -> dict:
    """What the invite page shows: team, role, email, expiry, and whether that email has an
    account already (then its password, not a new one, accepts). NoInvite, InviteUsed,
    InviteExpired otherwise."""
    with store.read() as db:
        inv = _open_invite(db, token)
        team = db.get(Team, inv.team_id)
        has_account = db.scalar(select(User.id).where(User.email == inv.email)) is not None
    return {"team": {"slug": team.slug, "name": team.name, "scorecard_visibility": team.scorecard_visibility}, "email": inv.email, "role": inv.role,
            "expires_at": _utc(inv.expires_at).isoformat(), "has_account": has_account}


def accept_invite(store: Store, token: str, password: str, ip: str = "") -> tuple[str, Staff]:
    """Accept an invite: a new account with `password` in the invite's team and role (or,
    if the email has an account, that team added to it, `password` being its password),
    signed in: (cookie token, Staff). Exactly once per invite."""
    with store.read() as db:
        inv = _open_invite(db, token)
        existing = db.scalar(select(User).where(User.email == inv.email))
    if existing is None:
        new_hash = passwords.hash_password(password)
    else:
        # counted like a sign-in: the invite must not become a way to guess a password
        user = _attempt(store, inv.email, (ip or "")[:64])
        if user is None or not passwords.verify(user.password_hash, password):
            raise LoginFailed(f"{inv.email} has an account already: give its password to join the team")
        if user.disabled_at is not None:
            raise AccessDenied(f"the account {inv.email} is disabled")
    t = now()
    with store.write() as db:
        done = db.execute(update(Invite).where(Invite.id == inv.id, Invite.used_at.is_(None), Invite.expires_at > t)
                          .values(used_at=t).execution_options(synchronize_session=False))
        if done.rowcount != 1:  # another accept got there first (or the week ended meanwhile)
            _open_invite(db, token)
            raise InviteUsed("this invite was accepted already")
        user = db.scalar(select(User).where(User.email == inv.email))
        if (user is None) != (existing is None):
            # an account for this email appeared (or went) since the check: nothing is
            # written (the invite stays open); the next try takes the other path
            raise AccountError(f"the account {inv.email} changed meanwhile; open the invite again")
        if user is None:
            user = User(email=inv.email, password_hash=new_hash, created_at=t)
            db.add(user)
            db.flush()
        else:
            db.execute(delete(LoginFailure).where(LoginFailure.email == inv.email))
        m, made = _get_or_create(db, Membership, {"user_id": user.id, "team_id": inv.team_id}, role=inv.role,
                                 created_at=t)
        m.role = inv.role
        _close_invites(db, inv.team_id, inv.email)  # any other link for this email is moot now
        session = _new_session(db, user.id, t)
        staff = _staff(db, user)
    return session, staff


def members(store: Store, team_id: int) -> dict:
    """A team for its admins' page: the team, its members with roles, its open invites."""
    t = now()
    with store.read() as db:
        team = db.get(Team, team_id)
        if team is None:
            raise AccountError(f"no team {team_id}")
        people = db.execute(select(User.email, User.disabled_at, Membership.role, Membership.created_at)
                            .join(User, User.id == Membership.user_id).where(Membership.team_id == team_id)
                            .order_by(User.email)).all()
        creator = User.__table__.alias("creator")
        open_ = db.execute(select(Invite.email, Invite.role, Invite.created_at, Invite.expires_at,
                                  creator.c.email.label("by"))
                           .outerjoin(creator, creator.c.id == Invite.created_by)
                           .where(Invite.team_id == team_id, Invite.used_at.is_(None), Invite.expires_at > t)
                           .order_by(Invite.created_at.desc())).all()
    return {"team": {"slug": team.slug, "name": team.name, "scorecard_visibility": team.scorecard_visibility},
            "members": [{"email": p.email, "role": p.role, "since": _utc(p.created_at).isoformat(),
                         "disabled": p.disabled_at is not None} for p in people],
            "invites": [{"email": i.email, "role": i.role, "created_at": _utc(i.created_at).isoformat(),
                         "expires_at": _utc(i.expires_at).isoformat(), "by": i.by} for i in open_],
            "roles": list(ROLES)}
