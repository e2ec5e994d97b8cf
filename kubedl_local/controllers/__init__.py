"""The embedded kube-controller-manager: the endpoints, garbage-collector, namespace and node lifecycle
controllers, and event recording; each works on the API server's registry in process."""
