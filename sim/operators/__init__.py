"""The job controllers the platform installs (Kubeflow Trainer with JobSet, Training Operator v1, KubeRay,
Kueue), as their pinned source builds pods from our objects and treats pods that end."""
