"""GET /prices: route and shapes."""
