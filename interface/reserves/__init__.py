"""The partner's reserves and the operator's adjustments: routes, shapes and the read of them."""
