"""Bearer tokens in Postgres (hashed) and the audit log of admin changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from federation.errors import InvalidArgument, NotFound
from federation.security.auth import TokenRow, new_token
from federation.store.models import ApiToken, AuditEvent, Tenant
from federation.validation import Violation

AUDITED_COLUMNS = ("id", "name", "tenant", "admin", "created_by", "expires_at", "revoked_at")  # never the hash


async def audit(conn: AsyncConnection, actor: str, action: str, kind: str, name: str,
                before: Any = None, after: Any = None) -> None:
    """Record one admin change in the transaction that makes it, so neither exists without the other."""
    await conn.execute(AuditEvent.__table__.insert().values(
        actor=actor, action=action, kind=kind, name=name, before=_plain(before), after=_plain(after)))


def _plain(row: Any) -> dict[str, Any] | None:
    """A row as JSON-ready values (timestamps as ISO text), or None."""
    if row is None:
        return None
    return {k: v.isoformat() if isinstance(v, datetime) else v for k, v in dict(row).items()}


def _token_view(row: Any) -> dict[str, Any]:
    return {k: row[k] for k in AUDITED_COLUMNS}


class TokenStore:
    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine

    async def create(self, actor: str, name: str, tenant: str | None, admin: bool,
                     ttl: timedelta | None) -> tuple[Any, str]:
        """A new token's row and its bearer token (shown this once; only its hash is kept)."""
        token_id, bearer, sha = new_token()
        expires = datetime.now(UTC) + ttl if ttl else None
        async with self.engine.begin() as conn:
            if tenant and (await conn.execute(select(Tenant.name).where(Tenant.name == tenant))).first() is None:
                raise InvalidArgument([Violation("tenant", f"tenant {tenant!r} not found")])
            await conn.execute(ApiToken.__table__.insert().values(
                id=token_id, name=name, tenant=tenant or None, admin=admin, secret_sha256=sha, created_by=actor,
                expires_at=expires))
            row = await self._get(conn, token_id)
            await audit(conn, actor, "create", "token", token_id, None, _token_view(row))
        return row, bearer

    async def revoke(self, actor: str, token_id: str) -> Any:
        async with self.engine.begin() as conn:
            before = await self._get(conn, token_id, for_update=True)
            if before["revoked_at"] is None:
                await conn.execute(update(ApiToken).where(ApiToken.id == token_id).values(
                    revoked_at=datetime.now(UTC)))
            row = await self._get(conn, token_id)
            await audit(conn, actor, "revoke", "token", token_id, _token_view(before), _token_view(row))
        return row

    async def list(self, tenant: str = "") -> list[Any]:
        query = select(ApiToken).order_by(ApiToken.created_at, ApiToken.id)
        if tenant:
            query = query.where(ApiToken.tenant == tenant)
        async with self.engine.connect() as conn:
            return list((await conn.execute(query)).mappings().all())

    async def load(self, token_id: str) -> TokenRow | None:
        """The row an authenticator checks a presented token against."""
        async with self.engine.connect() as conn:
            row = (await conn.execute(select(ApiToken).where(ApiToken.id == token_id))).mappings().first()
        if row is None:
            return None
        return TokenRow(row["id"], row["name"], row["tenant"], row["admin"], row["secret_sha256"], row["expires_at"],
                        row["revoked_at"])

    async def audit_events(self, kind: str = "", limit: int = 100) -> list[Any]:
        query = select(AuditEvent).order_by(AuditEvent.id.desc()).limit(limit)
        if kind:
            query = query.where(AuditEvent.kind == kind)
        async with self.engine.connect() as conn:
            return list((await conn.execute(query)).mappings().all())

    @staticmethod
    async def _get(conn: AsyncConnection, token_id: str, for_update: bool = False) -> Any:
        query = select(ApiToken).where(ApiToken.id == token_id)
        if for_update:
            query = query.with_for_update()
        row = (await conn.execute(query)).mappings().first()
        if row is None:
            raise NotFound(f"token {token_id!r} not found")
        return row
