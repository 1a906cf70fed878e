"""Staff accounts: users, teams and their roles, sessions, invites, password hashing.

`Staff` is who is signed in, as every other part of the app sees them: the domain's
permission checks take it, the web layer builds it from the session cookie."""

from __future__ import annotations

from dataclasses import dataclass, field


class AccessDenied(Exception):
    """Signed in, but this role may not do this in this team (HTTP 403)."""


class NotSignedIn(Exception):
    """Staff only: sign in first (HTTP 401; pages redirect to /login)."""


class AccountError(ValueError):
    """Bad input to an account operation: a malformed email, an unknown role, a bad team
    slug, a password too short (HTTP 400). The message is one line a person can act on."""


class LoginFailed(AccountError):
    """Wrong email or password; the same words whichever it was (HTTP 401)."""


class TooManyAttempts(AccountError):
    """Too many failed sign-ins for this email or from this address lately (HTTP 429,
    Retry-After: `retry_after_s`)."""

    def __init__(self, message: str, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s
        self.headers = {"Retry-After": str(retry_after_s)}


class NoInvite(AccountError):
    """No invite has this token (HTTP 404)."""


class InviteUsed(AccountError):
    """The invite was accepted already; it opens one account only (HTTP 409)."""


class InviteExpired(AccountError):
    """The invite's week is over (HTTP 410): ask for a new one."""


@dataclass(frozen=True)
class Staff:
    user_id: int
    email: str
    roles: dict[int, str] = field(default_factory=dict)  # team id -> admin | interviewer | reviewer
    teams: dict[int, str] = field(default_factory=dict)  # team id -> slug

    def role(self, team_id: int) -> str | None:
        return self.roles.get(team_id)

    def is_(self, team_id: int, *roles: str) -> bool:
        return self.roles.get(team_id) in roles

    def team_id(self, slug: str) -> int | None:
        return next((tid for tid, s in self.teams.items() if s == slug), None)
