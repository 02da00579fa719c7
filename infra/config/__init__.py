"""The platform stack's configuration: one model per config object, one reader."""
