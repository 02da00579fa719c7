"""Monitoring: kube-prometheus-stack, alerts, Grafana dashboards, training-job metrics."""
