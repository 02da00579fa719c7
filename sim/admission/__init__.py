"""What the API server admits of the objects the controllers create from ours: ports of the validating
webhooks the platform's charts and manifests install, each with the upstream test table it passes, the
ledger of every webhook those charts register (ledger.yaml) and the chain that follows a job's objects
through them (chain.py)."""
