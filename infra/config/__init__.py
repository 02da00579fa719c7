"""The platform stack's configuration, validated before any resource exists. Import from the modules
(nothing is re-exported here: `workloads` imports stack_files alone and must not load the models):

  platform.py       PlatformConfig (the model of a platform stack), ConfigError
  nodes.py          the system node group and the GPU pools
  addons.py         AddonsConfig: the `addons` object
  node_health.py    the `addons.nodeHealth` object: repair, the node monitoring agent, the GPU check
  base.py           the model base every config model shares, and the `Invalid` error validators raise
  errors.py         ConfigError and the one-line messages: key, value found, what is allowed
  secrets.py        the secret keys: encrypted in the stack file, placeholders offline
  pulumi_config.py  the one reader of the running stack's config (the only module importing pulumi)
  stack_files.py    the one reader of `Pulumi.<stack>.yaml` and `Pulumi.yaml`; which stacks exist
  cluster_rules.py environment.py placeholders.py   rules shared with the policy pack
"""
