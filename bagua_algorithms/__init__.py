"""Bagua's built-in algorithms. Each module is a plugin registered through its own entry point in
group ``bagua``, exactly as a third-party algorithm is."""
