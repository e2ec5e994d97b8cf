"""End-to-end scenarios through the CLI and SDK against a cluster (embedded by default; see conftest)."""
