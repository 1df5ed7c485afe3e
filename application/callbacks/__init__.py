"""Callbacks: status changes of transactions POSTed to the partner's URL, signed as Standard Webhooks.

`urls` decides which URLs may receive callbacks (and where exactly to connect), `snapshots` stores a
transaction's state as the outbox projection saw it, `outbox` is the SQL of deliveries and attempts, `sender`
makes one pinned HTTP request, and `delivery` runs the threads that send due deliveries with retries.
"""
