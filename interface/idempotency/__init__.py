"""The Idempotency-Key of POST and PUT, in a room of its own: `keys` (the rules, the keys' table, a create's
transaction code from its key) and `middleware` (`IdempotencyMiddleware`: a keyed request run once per key,
its claim riding with its first save); concurrent requests' claims and answers go as one statement each way
(`application.store.statement_batches`)."""
