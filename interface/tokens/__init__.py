"""POST /connect/token: its route, the shapes of its form and its answer, and its use case."""
