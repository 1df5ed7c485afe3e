"""Customers, their accounts and their limits over HTTP: routes, shapes and presenters."""
