"""One controller per resource; handlers translate HTTP to one use case and back."""
