"""The HTTP edge, shared by every feature: the middleware in the order `interface.app` lists it, bodies,
problems, the shapes every body builds on, the server's limits and the API's settings."""
