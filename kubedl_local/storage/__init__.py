"""The embedded cluster's storage: etcd and the watch cache in one (``store``), the bottom layer."""
