"""The callbacks the partner manages: `GET /callbacks` (its deliveries across its transactions, with each
attempt and the next one's time), `POST /callbacks/{eventId}/redeliver` (one sent again now, once per
Idempotency-Key), `POST /callbacks/secret/rotate` (the operator's: a new signing secret, shown once, with an
overlap during which both sign) and `DELETE /callbacks/secret/previous` (the rotated-out secret stops signing
at once). The mechanics are `projections.callbacks` (the outbox, the delivery worker, the secrets)."""

from __future__ import annotations

import math
from typing import Annotated

from litestar import Controller, Request, delete, get, post
from litestar.di import NamedDependency
from litestar.params import QueryParameter

from interface.callbacks import shapes as s
from interface.http.dependencies import principal
from interface.http.documented import IdempotencyKey, code_parameter, problems, version_header
from interface.http.problems import ApiProblem
from interface.http.security import AUDITOR, BROKER, OPERATOR, authorize, roles
from interface.shared import callback_presenters as presenters
from interface.shared.callback_shapes import CallbackDelivery
from interface.shared.query_parameters import choice, moment, moment_of, one_of
from projections.callbacks.outbox import DELIVERED, FAILED, PENDING, STOPPED, DeliveryFilter, DeliveryStore
from projections.callbacks.secrets import SecretRotations, SecretState

DeliveriesDep = NamedDependency[DeliveryStore]
RotationsDep = NamedDependency[SecretRotations]
STATUSES = (FAILED, PENDING, DELIVERED, STOPPED)
MAX_PAGE_SIZE = 200
MAX_PAGE = 1_000_000
EventId = Annotated[str, code_parameter("the delivery's eventId (its webhook-id)")]


def not_found(event_id: str) -> ApiProblem:
    return ApiProblem(404, "callback_not_found", f"no callback delivery {event_id!r} of this partner")


class CallbackDeliveriesController(Controller):
    path = "/callbacks"
    tags = ["Callbacks"]
    guards = [authorize]
    parameters = version_header()

    @get("/", operation_id="listCallbacks", opt=roles(BROKER, OPERATOR, AUDITOR), sync_to_thread=True)
    def list_callbacks(
        self,
        request: Request,
        deliveries: DeliveriesDep,
        status: Annotated[str | None, choice("status", STATUSES)] = None,
        created_from: Annotated[str | None, moment("from", "status changes at or after this time")] = None,
        created_to: Annotated[str | None, moment("to", "status changes before this time")] = None,
        page: Annotated[int, QueryParameter(ge=1, le=MAX_PAGE, description="page number, from 1")] = 1,
        page_size: Annotated[int, QueryParameter(name="pageSize", ge=1, le=MAX_PAGE_SIZE)] = 50,
    ) -> s.CallbackPage:
        """The callback deliveries of the partner's transactions, newest first, narrowed by status
        (pending, delivered, failed: given up after the retry window, stopped: the URL answered 410) and by
        the time of the status change; each with its attempts (time, answer, error) and, while pending, the
        next attempt's time."""
        status = one_of("status", status, STATUSES)
        where = DeliveryFilter(status, moment_of("from", created_from), moment_of("to", created_to))
        total, records = deliveries.page(principal(request).partner, where, page, page_size)
        return s.CallbackPage(
            page=page,
            page_size=page_size,
            total=total,
            total_pages=math.ceil(total / page_size),
            records=[presenters.delivery(record) for record in records],
        )

    @post(
        "/{event_id:str}/redeliver",
        operation_id="redeliverCallback",
        status_code=202,
        opt=roles(BROKER, OPERATOR),
        responses=problems(404),
        sync_to_thread=True,
    )
    def redeliver(
        self,
        request: Request,
        event_id: EventId,
        deliveries: DeliveriesDep,
        idempotency_key: IdempotencyKey,
    ) -> CallbackDelivery:
        """Sends a delivery again now, whatever its status, with the same id and body (the transaction as it
        stood after that status change): it becomes pending, due at once, with a new retry window; a URL
        that answered 410 is opened again. Newer deliveries of the transaction are not sent again, so this
        one may arrive after them; a pending newer one waits behind it. Once per Idempotency-Key."""
        record = deliveries.redeliver(principal(request).partner, event_id, idempotency_key)
        if record is None:
            raise not_found(event_id)
        return presenters.delivery(record)


class CallbackSecretController(Controller):
    path = "/callbacks/secret"
    tags = ["Callbacks"]
    guards = [authorize]
    opt = roles(OPERATOR)
    parameters = version_header()

    @post("/rotate", operation_id="rotateCallbackSecret", status_code=201, sync_to_thread=True)
    def rotate(self, request: Request, secret_rotations: RotationsDep) -> s.RotatedCallbackSecret:
        """A new signing secret for the partner's callbacks, shown in this answer only (it is kept nowhere:
        the service derives it again when it signs). The secret it replaces keeps signing beside it until
        `previousUntil` (24 h by default), each callback carrying both signatures. Refused with an
        Idempotency-Key, whose answer would be kept: a second rotation is the way to a secret lost."""
        if request.headers.get("idempotency-key") is not None:
            raise ApiProblem(
                400,
                "idempotency_key_not_accepted",
                "a rotation takes no Idempotency-Key: its answer, the new secret, is never kept",
            )
        rotated = secret_rotations.rotate(principal(request).partner)
        state = rotated.state
        return s.RotatedCallbackSecret(
            secret=rotated.secret, rotated_at=state.rotated_at, previous_until=state.previous_until
        )

    @delete("/previous", operation_id="retirePreviousCallbackSecret", status_code=200, sync_to_thread=True)
    def retire_previous(self, request: Request, secret_rotations: RotationsDep) -> s.CallbackSecretState:
        """The secret rotated out stops signing now, before its overlap's end (nothing changes when none
        signs): the partner's callbacks carry the current secret's signature alone."""
        return _state(secret_rotations.retire_previous(principal(request).partner))


def _state(state: SecretState) -> s.CallbackSecretState:
    return s.CallbackSecretState(rotated_at=state.rotated_at, previous_until=state.previous_until)
