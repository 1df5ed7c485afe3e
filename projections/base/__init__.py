"""What every projection builds on, importing no projection: `runner` (a projection's spec, its view opened,
the log replayed into it a page at a time), `connection` (a running projection's one connection and its
advisory lock), `postgres` (`ReadModel`: the tracking recorder of a view's tables) and `json_rows` (rows as
JSON). The projections (`projections/`, `projections/callbacks/`) import it; it imports none of them."""
