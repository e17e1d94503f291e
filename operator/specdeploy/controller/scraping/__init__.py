"""The telemetry loop: scraping vLLM pods' /metrics (scrape), the k it chooses and writes (telemetry), and the canary's counters (canary_telemetry)."""
