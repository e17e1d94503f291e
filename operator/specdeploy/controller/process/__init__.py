"""The running operator: start-up and shutdown (main), its settings (env), the API client (kube), leader election, the RBAC it checks it holds, and its own /metrics."""
