"""Kubernetes itself, as the platform's pinned version behaves: the scheduler's matching, NetworkPolicy
semantics, and the API server's CEL validation of custom resources."""
