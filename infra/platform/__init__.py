"""The platform's AWS foundation: network, EKS cluster, managed node groups, storage, keys, identity."""
