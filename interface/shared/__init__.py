"""What several features share, so that no feature imports another: the `Feature` each one describes itself
with, the one reading of instants and of the query parameters many routes take, the transaction as every
endpoint presents it (its shapes and presenters) and its reads from the read models, the postings read after
the caller's writes (the reserves, the reconciliation, the console), the issuing of tokens (the token
endpoint, the console's sign-in) and the refusals several features' operations share. It imports no
feature."""
