"""Callbacks: each status change of a transaction with a callback URL POSTed to that URL, signed as Standard
Webhooks, retried until delivered or given up. The whole feature lives here but for two edges: the static
URL rules are `domain.callback_urls` (the order desk and the settings check apply them too), and the body
of a callback is rendered by the interface (`interface.transactions.callback_bodies.renderer`, passed in as
`Renderer`).

What lives where:

- `outbox`: the tables (`callback_transactions`, `callback_outbox`, `callback_attempts`,
  `callback_endpoints`) and every query of them; `DeliveryStore` claims, records and lists deliveries.
- `projection`: `CallbackOutbox`, the projection that keeps each transaction's state and inserts a delivery
  per status change, with its tracking position (see `projections.catalog`).
- `snapshots`: a transaction's state as bytes (eventsourcing's snapshot) and back.
- `urls`: `CallbackUrlPolicy`, the static rules plus the host's addresses now (DNS); the order desk gets it
  through `application.ports.CallbackUrlCheck` when a request names a URL, the worker before each delivery.
- `sender`: one HTTP POST, pinned to a vetted address, following no redirect.
- `delivery`: `DeliveryWorker`, the threads that claim due deliveries, sign, send, and record or retry.
- `delivery_config`: `DeliveryConfig`, the worker's timeouts, backoff and threads (set by the environment).
- `service`: `Callbacks`, what one API process runs (tables made sure of, the worker, the store).

The path of a callback, from event to delivery:

1. A use case records a transaction event; its order holds the callback URL, fixed and checked when the
   transaction was created (`application.orders`, with `urls.CallbackUrlPolicy` wired by the interface).
2. The `CallbackOutbox` projection applies the event to the kept state; if the status changed and there is
   a URL, it inserts a delivery (`evt_` id stable across rebuilds, `sequence` from 1, the state after the
   event) in the same database transaction as its tracking position.
3. A `DeliveryWorker` thread in any API process claims the next due delivery whose earlier ones are all
   finished (a lease, `FOR UPDATE SKIP LOCKED`), resolves and re-checks the URL, renders the body from the
   kept state, signs it with the partner's secret and POSTs it to a vetted address.
4. A 2xx delivers it; 410 Gone stops the endpoint; anything else is retried with backoff and jitter until
   the retry window is over (then FAILED). Every attempt is recorded, and
   `GET /transactions/custodian/{code}/callbacks` lists them (`DeliveryStore.deliveries`).
"""
