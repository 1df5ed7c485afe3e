"""Transactions over HTTP: buys, sells, the custodian flows (commit, payouts), reading them and their
callbacks: routes, shapes, presenters and the mapping of a body to its command."""
