"""Models of upstream behaviour that only the offline commands and the tests use.

Each module here re-implements, or runs, a piece of someone else's software at the version the platform
pins, so that a stack can be judged without a cloud: how operators build pods from our objects, how the
scheduler, the API server and Karpenter treat them, how the Pulumi CLI and engine hand a program its config,
what pulumi-eks checks in its provider, how Helm renders a chart. `sim/models.yaml` lists every model with
its upstream project, version, mirrored source and the upstream test table that checks it: a port is
trusted as far as upstream's own cases, run on it by tests/sim/test_*_upstream.py, pass.

What `pulumi up` runs (the Pulumi program), what the engine loads (the policy pack) and what the job image
runs (`trainer/`) never import this package (tests/test_import_rules.py computes their import closures);
`plan`, `render`, `rehearse`, `check`, `synth`, `policy.scan` and the tests may.
"""
