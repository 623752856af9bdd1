"""OIDC: JSON Web Tokens from a configured issuer, checked against its JWKS file, as callers.

The signature, issuer, audience and expiry are checked by PyJWT; a claim names the tenant, and a
value in another claim (a group, say) makes the caller an admin. Keys are read from a file (the
issuer's `jwks_uri` document, fetched by whoever deploys the server), so the server makes no
outbound calls and a key rotation is a file update and a restart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jwt

from federation.security.auth import Principal
from federation.validation import Violations, check_name

ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "ES512", "PS256", "EdDSA"]


@dataclass(frozen=True)
class OidcConfig:
    issuer: str
    audience: str
    jwks: str  # the JWKS document, JSON
    tenant_claim: str = "tenant"
    admin_claim: str = "groups"
    admin_value: str = "federation-admins"


class OidcVerifier:
    def __init__(self, config: OidcConfig) -> None:
        self.config = config
        try:
            self.keys = jwt.PyJWKSet.from_json(config.jwks)
        except (jwt.PyJWTError, ValueError) as err:  # at start, not at the first call
            raise ValueError(f"the JWKS document is not usable: {err}") from None

    def verify(self, token: str) -> Principal | str:
        """The caller the token names, or why it is refused (never the token's contents)."""
        try:
            kid = jwt.get_unverified_header(token).get("kid")
            key = next((k for k in self.keys.keys if kid is None or k.key_id == kid), None)
            if key is None:
                return "token signed by an unknown key"
            claims: dict[str, Any] = jwt.decode(token, key.key, algorithms=ALGORITHMS, audience=self.config.audience,
                                                issuer=self.config.issuer,
                                                options={"require": ["exp", "iss", "aud", "sub"]})
        except jwt.ExpiredSignatureError:
            return "token expired"
        except jwt.PyJWTError:
            return "invalid token"
        name = f"oidc {claims['sub']}"
        groups = claims.get(self.config.admin_claim)
        if self.config.admin_value in (groups if isinstance(groups, list) else [groups]):
            return Principal(name, None, True)
        tenant = claims.get(self.config.tenant_claim)
        v = Violations()
        if isinstance(tenant, str):
            check_name(v, self.config.tenant_claim, tenant)
        if not isinstance(tenant, str) or v:
            return f"token has no valid {self.config.tenant_claim!r} claim"
        return Principal(name, tenant, False)
