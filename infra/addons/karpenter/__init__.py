"""Karpenter: controller and its IAM, GPU NodePools and EC2NodeClasses."""
