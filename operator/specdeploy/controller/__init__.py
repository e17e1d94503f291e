"""The operator's shell: kopf handlers, the Kubernetes client, leader election, metrics."""

# How the operator logs (`specdeploy run --log-format`, $SPECDEPLOY_LOG_FORMAT, the chart's
# logFormat); kept here, light, so the CLI can offer the choices without importing kopf.
LOG_FORMATS = ("text", "json")
