"""specdeploy: a Kubernetes operator for vLLM speculative decoding that checks the draft first."""

import os

# Only transformers' config classes are used, never torch; without this transformers warns at
# import that PyTorch is missing, in every CLI run and operator log. A user's setting wins.
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

__version__ = "0.1.0"
