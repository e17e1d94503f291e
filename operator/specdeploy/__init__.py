"""specdeploy: a Kubernetes operator for vLLM speculative decoding that checks the draft first."""

__version__ = "0.1.0"

# The vLLM release whose rules the validator restates and the parity suite verifies;
# the default image follows it so the rules and the running server agree.
VLLM_VERSION = "0.32.0"
DEFAULT_IMAGE = f"vllm/vllm-openai:v{VLLM_VERSION}"
