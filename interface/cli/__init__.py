"""The command line: the `broker-ledger` console script (`main`) and its commands."""
