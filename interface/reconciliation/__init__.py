"""The reconciliation of a partner's period (`GET /reconciliation`): its reserves rolled forward from the
postings, and its chain reports matched to their transactions and postings, with the differences."""
