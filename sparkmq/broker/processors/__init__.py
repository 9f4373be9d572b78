"""Request processors of the broker, one module per family of request codes."""
