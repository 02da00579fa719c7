"""What every component of the platform takes: typed args, and its `depends_on` through `opts`.

A component is `Component(name, args, opts)`: `args` a `ComponentArgs` model (frozen; Pulumi Outputs,
Resources and providers allowed as values), `opts` Pulumi's own resource options. What a component must
wait for is `opts.depends_on`, never an args field. Pulumi does not pass a component's `depends_on` on to
its children (a child inherits only the parent's providers, `protect` and transformations:
pulumi/resource.py, `Resource.__init__`), so a component hands it, through `child_options`, to each child
that must wait.
"""

from __future__ import annotations

import pulumi
from pydantic import BaseModel, ConfigDict


class ComponentArgs(BaseModel):
    """Base of the components' typed args. Pulumi inputs are annotated `pulumi.Output[T] | T`."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)


def child_options(
    parent: pulumi.Resource, opts: pulumi.ResourceOptions | None, **options
) -> pulumi.ResourceOptions:
    """Options for a child of `parent` that waits for everything `parent` waits for (`opts.depends_on`);
    a `depends_on` among `options` adds what this child alone waits for."""
    waits_for = pulumi.ResourceOptions(depends_on=opts.depends_on if opts else None)
    return pulumi.ResourceOptions.merge(pulumi.ResourceOptions(parent=parent, **options), waits_for)
