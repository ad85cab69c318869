"""Memory planning without allocating: what fits in an accelerator (the paper's Table 1)."""
