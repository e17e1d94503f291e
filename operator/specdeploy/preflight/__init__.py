"""The preflight: the image's own vLLM judges the exact pod args on CPU, before any GPU.

`vllm_judge.py` is the in-image judge (standard library and the image's vLLM only). The rest
is pure and shared by the operator, the CLI and the tests: `request` (what the judge is asked
and the cache key), `job` (the Job and ConfigMap that run it in the cluster), `outcome` (the
judge's verdict line, and what a Job and its pod say about the run).
"""

from __future__ import annotations

from pathlib import Path

# The judge file as shipped in this package: the operator puts its text in the ConfigMap, the
# CLI runs it under a local Python.
JUDGE_FILE = Path(__file__).resolve().parent / "vllm_judge.py"
