"""The domain: customers, accounts, transactions, limits and money. Pure Python, no I/O."""
