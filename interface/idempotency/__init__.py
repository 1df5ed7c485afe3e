"""The Idempotency-Key of POST and PUT, in a room of its own: `keys` (the rules, the keys' table, a create's
transaction code from its key), `middleware` (`IdempotencyMiddleware`: a keyed request run once per key,
its claim riding with its first save) and `statement_batches` (concurrent requests' claims and answers sent
as one statement)."""
