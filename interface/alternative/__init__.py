"""The alternative buy and sell endpoints, named by account: routes and shapes."""
