"""Preflight: vLLM itself judges a pod's args in the pod's own image (`vllm_judge.py`)."""
