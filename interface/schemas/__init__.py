"""Request and response bodies as msgspec Structs: camelCase on the wire, unknown fields refused."""
