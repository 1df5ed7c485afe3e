"""POST /connect/token's use case, which the console's sign-in shares: a client's secret checked, its failed
attempts counted, a token issued.

Refusals are the API's problems: 401 `invalid_client` for an unknown client or a wrong secret, 429
`too_many_failed_attempts` while the client id or the address has failed too often, 429
`secret_checks_busy` while an argon2 hash of before cannot be checked now, 400 `invalid_scope` for roles
the client does not hold.

The right secret always gets its token, however many failures came from its address: a check costs a few
microseconds (an HMAC), so the failure counts need not stop it, and only turn further failures into 429. An
argon2 hash of before (`Credentials.costly_to_check`) is not checked at all while the address is refused.
"""

from __future__ import annotations

from dataclasses import dataclass

from application.credentials import ClientRecord, Credentials
from application.secret_hashes import SecretChecksBusy
from interface.http.auth import FailedAttempts, InvalidScope, IssuedToken, TokenService
from interface.http.problems import ApiProblem


@dataclass(frozen=True)
class TokenIssuance:
    """The app's one, built by the composition root and handed to the routes as `issuance`."""

    credentials: Credentials
    tokens: TokenService
    attempts: FailedAttempts

    def issue(self, client_id: str, secret: str, scope: str | None, address: str | None) -> IssuedToken:
        """A token for the client whose secret this is, with the roles of `scope` (default all of its)."""
        client = self.authenticated_client(client_id, secret, address)
        try:
            return self.tokens.issue(client, scope)
        except InvalidScope as error:
            raise ApiProblem(400, "invalid_scope", error.reason) from None

    def authenticated_client(self, client_id: str, secret: str, address: str | None) -> ClientRecord:
        retry_after = self.attempts.check(client_id, address)
        if retry_after is not None and self.credentials.costly_to_check(client_id):
            raise _too_many_failures(retry_after)
        try:
            client = self.credentials.verify_secret(client_id, secret)
        except SecretChecksBusy as busy:
            raise ApiProblem(
                429,
                "secret_checks_busy",
                "too many secrets are being checked at once; retry shortly",
                headers={"Retry-After": str(busy.retry_after)},
            ) from None
        if client is not None:
            self.attempts.clear(client_id, address)
            return client
        if retry_after is not None:
            raise _too_many_failures(retry_after)
        retry_after = self.attempts.record_failure(client_id, address)  # others' failures since may fill it
        if retry_after is not None:
            raise _too_many_failures(retry_after)
        raise ApiProblem(
            401,
            "invalid_client",
            "unknown client or wrong secret",
            headers={"WWW-Authenticate": 'Basic realm="broker-ledger"'},
        )


def _too_many_failures(retry_after: int) -> ApiProblem:
    return ApiProblem(
        429,
        "too_many_failed_attempts",
        "too many failed attempts; retry later",
        headers={"Retry-After": str(retry_after)},
    )
