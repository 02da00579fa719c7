"""Pulumi's side of a deploy: the CLI's config merge, the engine and language host that run the program
and the policy pack, and the checks pulumi-eks runs inside its provider."""
