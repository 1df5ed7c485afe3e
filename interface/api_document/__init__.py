"""The API document at /schema: made from the routes, and told what the settings decide, which codes each
operation can refuse with, and the checked examples of docs/api.md."""
