"""Staff accounts: users, teams and their roles, sessions, invites, password hashing.

`Staff` is who is signed in, as every other part of the app sees them: the domain's
permission checks take it, the web layer builds it from the session cookie."""

from __future__ import annotations

from dataclasses import dataclass, field


class AccessDenied(Exception):
    """Signed in, but this role may not do this in this team (HTTP 403)."""


class NotSignedIn(Exception):
    """Staff only: sign in first (HTTP 401; pages redirect to /login)."""


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
