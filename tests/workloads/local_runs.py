"""Trainer arguments for a local run of a stack's job that takes seconds on a CPU."""

FEW_STEPS = [
    "--",
    "--train.max_steps",
    "4",
    "--train.warmup_steps",
    "1",
    "--train.eval_every",
    "2",
    "--train.log_every",
    "2",
    "--data.synthetic_train_size",
    "128",
    "--data.synthetic_val_size",
    "32",
]
