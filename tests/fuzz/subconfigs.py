"""A targeted generator over the keys transformers' PretrainedConfig reads at every config level (dtype,
torch_dtype, id2label, label2id, num_labels, problem_type, architectures, rope_scaling/rope_parameters,
quantization_config, its methods' names, ...), set to hostile values at the top level and inside every
sub-config (text_config, vision_config, EAGLE's `model`, speculators' transformer_layer_config, rope dicts)
of every fixture config, straight through read_geometry (no CLI, no fork: ~350k cases in ~6 min).

Problems (exit 1): an exception out of read_geometry, or a case over 2 s. Also listed, as information:
`config-rejected` findings whose message does not name the key set (transformers' own refusals).

    PYTHONPATH=operator python -m tests.fuzz.subconfigs
"""
import resource, time, copy, json, glob, sys, traceback, io, contextlib
from pathlib import Path
ROOT = Path(__file__).resolve().parents[2]
from specdeploy.geometry.model_geometry import read_geometry, _MEMO
from specdeploy.vllm import DEFAULT_VERSION, rule_set
resource.setrlimit(resource.RLIMIT_AS, (4*2**30, 4*2**30))
F = rule_set(DEFAULT_VERSION)
files = sorted(glob.glob(str(ROOT / 'tests/fixtures/model-configs/*.json'))+glob.glob(str(ROOT / 'tests/fixtures/synthetic/*.json')))
KEYS = ["to_dict","get_text_config","use_return_dict","dtype","torch_dtype","id2label","label2id","num_labels","problem_type","architectures","quantization_config","rope_scaling","rope_parameters",
 "return_dict","output_hidden_states","output_attentions","tie_word_embeddings","is_encoder_decoder","chunk_size_feed_forward","pruned_heads",
 "tokenizer_class","prefix","bos_token_id","pad_token_id","eos_token_id","sep_token_id","decoder_start_token_id","task_specific_params",
 "finetuning_task","use_bfloat16","add_cross_attention","transformers_version","_name_or_path","model_type","text_config","vision_config",
 "sub_configs","attn_implementation","_attn_implementation","_attn_implementation_internal","torchscript","tf_legacy_loss","cross_attention_hidden_size",
 "is_decoder","tie_encoder_decoder","base_config_key","_commit_hash","layer_types","rope_theta","partial_rotary_factor","max_position_embeddings",
 "output_router_logits","use_cache","experts_implementation","_experts_implementation","dict","__class__","to_dict","attribute_map","head_dim","name_or_path",
 "num_attention_heads","hidden_size","vocab_size","initializer_range","rms_norm_eps","hidden_act","quant_method","auto_map","sliding_window","max_window_layers",
 "decoder_sparse_step","mlp_only_layers","rope_interleave","moe_layer_freq","scoring_func","topk_method","n_group","topk_group","routed_scaling_factor","norm_topk_prob",
 "rope_type","factor","original_max_position_embeddings","embedding_multiplier","interleave_moe_layer_step","moe_layers","no_rope_layer_interval","attention_chunk_size",
 "floor_scale","attn_scale","attn_temperature_tuning","deepstack_visual_indexes","out_hidden_size","spatial_merge_size","patch_size","image_size","num_channels","depth",
]
VALUES = [5, "x", "", "float99", "torch.", ".", "torch.x", True, None, [], [1], {}, {"a":1}, {1:2}, {"0":"a"}, {"x":"y"}, -1, 1.5, 10**30, "bfloat16", ["a"], [[1]], [{}], {"rope_type":5}, {"factor":"x"}, {"rope_type":"yarn"}, {"type":"linear"}, {"rope_type":"x"},
   float("nan"), "a"*300, {"rope_type":"linear","factor":2.0}, {"full_attention": 5}, {"full_attention": {"rope_type": "yarn"}}, {"quant_method": 5}, {"quant_method": "fp8"}, {"quant_method":"gptq","bits":"x"}, [None], "None"]
seen = {}
def subpaths(raw):
    yield ()
    for k, v in raw.items():
        if isinstance(v, dict) and k not in ("auto_map",):
            yield (k,)
            for k2, v2 in v.items():
                if isinstance(v2, dict) and k2 in ("text_config","vision_config","rope_scaling","rope_parameters","quantization_config"):
                    yield (k, k2)
n = 0
for f in files:
    base = json.load(open(f)); name = f.split('/')[-1][:-5]
    for path in list(subpaths(base)):
        for key in KEYS:
            for val in VALUES:
                raw = copy.deepcopy(base); node = raw
                for p in path: node = node[p]
                node[key] = copy.deepcopy(val)
                n += 1
                t0=time.time()
                _MEMO.clear()
                try:
                    with contextlib.redirect_stderr(io.StringIO()):
                        g, fs = read_geometry(raw, "c", F)
                except Exception as e:
                    sig = ("EXC", ".".join(path+(key,)), type(e).__name__)
                    if sig not in seen:
                        seen[sig] = (name, repr(val)[:40], traceback.format_exc().splitlines()[-3:])
                    continue
                where = ".".join(path+(key,))
                if time.time()-t0>2: seen.setdefault(('SLOW',where,name),(repr(val)[:40],time.time()-t0))
                for fi in fs:
                    if fi.code == "config-rejected" and key not in fi.message:
                        sig = ("REJ", where, fi.message[:70])
                        if sig not in seen: seen[sig] = (name, repr(val)[:40], fi.message[:200])
print(n, "cases", file=sys.stderr)
for s, v in sorted(seen.items(), key=str): print(s, v)
sys.exit(1 if any(k[0] in ('EXC', 'SLOW') for k in seen) else 0)
