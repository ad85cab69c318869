"""``make validate-hw``: published hardware profiles checked against published training throughputs."""
