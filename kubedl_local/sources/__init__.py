"""What the embedded API server reads from the pinned Kubernetes release, fetched once (see __main__)."""
