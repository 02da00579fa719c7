"""Offline tools over the platform program: `synth` (Pulumi mocks) and the idle-cost estimate."""
