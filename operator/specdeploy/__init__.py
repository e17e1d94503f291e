"""specdeploy: a Kubernetes operator for vLLM speculative decoding that checks the draft first."""

import os

# Only transformers' config classes are used, never torch; without this transformers warns at
# import that PyTorch is missing, in every CLI run and operator log. A user's setting wins.
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

__version__ = "0.1.0"

# The vLLM release whose rules the validator restates and the parity suite verifies;
# the default image follows it so the rules and the running server agree.
VLLM_VERSION = "0.32.0"
DEFAULT_IMAGE = f"vllm/vllm-openai:v{VLLM_VERSION}"
