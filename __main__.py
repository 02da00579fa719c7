"""Pulumi entry point. A stack whose config sets `mlops-eks:platformStack` deploys training jobs onto
that platform (a workload stack); every other stack is a platform stack."""

import pulumi

if pulumi.Config().get("platformStack"):
    from workloads.program import program
else:
    from infra.program import program

program()
