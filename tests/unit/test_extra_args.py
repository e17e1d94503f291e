"""`spec.vllm.extraArgs` judged by the judging release's own server CLI (its flags as data)."""

from __future__ import annotations


import pytest

from specdeploy.api.spec import SpeculativeDeploymentSpec
from specdeploy.render.pod import vllm_args
from specdeploy.validation.extra_args import OWNED_FLAGS, check_extra_args
from specdeploy.vllm import SUPPORTED_VERSIONS, rule_set
from tests.unit.test_render import make_plan

BASE = {"target": {"model": "meta-llama/Llama-3.1-8B-Instruct"}, "draft": {"method": "ngram", "numSpeculativeTokens": 3}}


def judge(args: list[str], version: str = "0.32.0") -> list[tuple[str, str]]:
    spec = SpeculativeDeploymentSpec.model_validate({**BASE, "vllm": {"extraArgs": args}})
    return [(f.code, f.field) for f in check_extra_args(spec, rule_set(version))]


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
@pytest.mark.parametrize("args", [
    ["--enable-prefix-caching"],
    ["--max-num-seqs", "64"],
    ["--max-num-seqs=64"],
    ["--max_num_seqs", "64"],                      # underscores, as FlexibleArgumentParser allows
    ["--compilation-config.mode", "3"],             # a key of a JSON config flag
    ["--dtype", "bfloat16"],
    ["--max-num-batched", "8192"],                  # a unique prefix of --max-num-batched-tokens
    ["-O3"],
    ["--lora-target-modules", "q_proj", "v_proj"],  # nargs "+"
])
def test_flags_vllm_accepts_pass(args: list[str], version: str) -> None:
    assert judge(args, version) == []


@pytest.mark.parametrize("version", SUPPORTED_VERSIONS)
@pytest.mark.parametrize(("args", "expected"), [
    (["--no-such-flag"], [("extra-arg-unknown-flag", "spec.vllm.extraArgs[0]")]),
    (["--max-num-seqs"], [("extra-arg-missing-value", "spec.vllm.extraArgs[0]")]),
    (["--max-num-seqs", "--enforce-eager"], [("extra-arg-missing-value", "spec.vllm.extraArgs[0]")]),
    (["--enforce-eager", "true"], [("extra-arg-unexpected-value", "spec.vllm.extraArgs[1]")]),
    (["--enforce-eager=1"], [("extra-arg-unexpected-value", "spec.vllm.extraArgs[0]")]),
    (["; rm -rf /"], [("extra-arg-unexpected-value", "spec.vllm.extraArgs[0]")]),
    (["--dtype", "float64"], [("extra-arg-invalid-choice", "spec.vllm.extraArgs[0]")]),
    (["--max-num"], [("extra-arg-unknown-flag", "spec.vllm.extraArgs[0]")]),  # ambiguous prefix
    (["--enable-prefix-caching", "--tensor-parallel-size", "2", "--port=9000"],
     [("extra-arg-owned-by-plan", "spec.vllm.extraArgs[1]"), ("extra-arg-owned-by-plan", "spec.vllm.extraArgs[3]")]),
    (["-tp", "2"], [("extra-arg-owned-by-plan", "spec.vllm.extraArgs[0]")]),
    (["--speculative-config.num_speculative_tokens", "9"], [("extra-arg-owned-by-plan", "spec.vllm.extraArgs[0]")]),
    (["--tensor-parallel", "4"], [("extra-arg-owned-by-plan", "spec.vllm.extraArgs[0]")]),  # prefix of an owned flag
])
def test_flags_vllm_refuses_are_named(args: list[str], expected: list[tuple[str, str]], version: str) -> None:
    assert judge(args, version) == expected


def test_each_release_spells_the_negative_of_a_boolean_flag_its_own_way() -> None:
    """0.32.0's argparse BooleanOptionalAction says --no-x; 0.33.0's says --disable-x."""
    assert judge(["--no-enable-prefix-caching"], "0.32.0") == []
    assert judge(["--disable-prefix-caching"], "0.33.0") == []
    assert judge(["--disable-prefix-caching"], "0.32.0") == [("extra-arg-unknown-flag", "spec.vllm.extraArgs[0]")]
    assert judge(["--no-trust-remote-code"], "0.32.0") == [("extra-arg-owned-by-plan", "spec.vllm.extraArgs[0]")]


def test_a_flag_only_the_newer_release_has_is_refused_by_the_older() -> None:
    assert judge(["--monokernel"], "0.33.0") == []
    assert judge(["--monokernel"], "0.32.0") == [("extra-arg-unknown-flag", "spec.vllm.extraArgs[0]")]


def test_every_flag_the_renderer_writes_is_owned_and_exists_in_every_release() -> None:
    spec = SpeculativeDeploymentSpec.model_validate({**BASE, "target": {"model": "m", "revision": "r", "trustRemoteCode": True},
                                                     "serving": {"maxModelLen": 4096, "kvCacheDtype": "fp8"}})
    written = {a for a in vllm_args(spec, make_plan()) if a.startswith("--")}
    assert written <= OWNED_FLAGS
    for version in SUPPORTED_VERSIONS:
        flags = rule_set(version).server_flags
        assert all(flag in flags for flag in OWNED_FLAGS if flag != "--model"), version
