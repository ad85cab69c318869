"""Turn the ranks' results into metrics.json, trace.json and timeline.png."""
