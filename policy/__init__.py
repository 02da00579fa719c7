"""Guardrails for every mlops-eks stack: CrossGuard policies (pure checks over a resource's type and
inputs, wrapped for pulumi-policy in `policy.pack`) and the checkov / hadolint scanner gates
(`policy.scan`, which renders the Helm releases with `sim.helm_render`). The pack's entry point is
policy/__main__.py (`pulumi preview --policy-pack policy`)."""
