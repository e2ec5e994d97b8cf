"""kubedl-py: a KubeDL-style training-job controller for Kubernetes, in Python asyncio."""

__version__ = "0.1.0"
