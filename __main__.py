"""Pulumi entry point. A stack whose config sets `mlops-eks:platformStack` deploys training jobs onto
that platform (a workload stack); every other stack is a platform stack."""

from infra.startup import imports_without_gc

with imports_without_gc():
    import pulumi

    from infra.contract import PLATFORM_STACK_KEY

    if pulumi.Config().get(PLATFORM_STACK_KEY):
        from workloads.program import program
    else:
        from infra.program import program

program()
