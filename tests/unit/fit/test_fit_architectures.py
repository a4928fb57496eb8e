"""Hand-computed sizes for real architectures (configs in fit_configs.py).

Conventions in the comments: P = parameters, B = bytes; GiB = 2**30; the catalog reads a vendor's
"80 GB" as 80 GiB = 85,899,345,920 B. Runtime overhead (vLLM-like defaults, fit.Runtime):
1 GiB + 8192 tokens x 2 B x (2h + (4h + 3 ffn)/tp) + 4 B x 256 rows x vocab / tp.
"""

from __future__ import annotations

import pytest
from fit_configs import (
    DEEPSEEK_V3,
    GEMMA_3_27B,
    GPT_OSS_120B,
    LLAMA_3_1_8B,
    LLAMA_3_1_70B,
    MIXTRAL_8X7B,
    QWEN2_5_7B_AWQ,
)

from lair.fit import (
    Hardware,
    KvLayout,
    Layout,
    decode_bound,
    facts_from_config,
    find_device,
    fit,
    kv_layer_bytes,
    prefill_bound,
)

GIB = 2**30


# ------------------------------------------------------------------ dense GQA: Llama-3.1-8B / 70B


def test_llama_3_1_8b_params_and_kv() -> None:
    f = facts_from_config(LLAMA_3_1_8B)
    # per layer: q 4096x4096 = 16,777,216; k, v 4096x1024 = 4,194,304 each; o 16,777,216
    #   -> attention 41,943,040; MLP 3 x 4096 x 14336 = 176,160,768; 2 norms 8,192 -> 218,112,000
    # 32 layers 6,979,584,000 + embed and lm_head 2 x 128256 x 4096 = 1,050,673,152 + final norm 4,096
    assert f.total_params == 8_030_261_248
    assert f.active_params == f.total_params
    assert f.weight_bytes == 2 * 8_030_261_248  # bf16
    assert f.embedding_bytes == 1_050_673_152 // 2 * 2  # input table 525,336,576 P x 2 B
    assert f.attention == "gqa"
    # KV: 2 (K, V) x 8 heads x 128 dims x 2 B x 32 layers = 131,072 B/token; fp8 halves it
    assert KvLayout(f, "auto").bytes_per_token == 131_072
    assert KvLayout(f, "fp8").bytes_per_token == 65_536


def test_llama_3_1_8b_on_h200() -> None:
    f = facts_from_config(LLAMA_3_1_8B)
    r = fit(f, Hardware(find_device("H200")), Layout(), context=32_768)
    # budget: int(0.9 x 141 GiB) = int(136,257,837,465.6)
    assert r.budget_bytes_per_gpu == 136_257_837_465
    # overhead: 1,073,741,824 + 8192 x 2 x (8,192 + 16,384 + 43,008) = 1,107,296,256
    #           + 4 x 256 x 128,256 = 131,334,144  -> 2,312,372,224
    assert r.overhead_bytes_per_gpu == 2_312_372_224
    # KV budget 136,257,837,465 - 16,060,522,496 - 2,312,372,224 = 117,884,942,745
    assert r.kv_budget_bytes_per_gpu == 117_884_942_745
    assert r.kv_pool_tokens == 899_390  # 117,884,942,745 // 131,072
    assert r.max_concurrency_at_context == 27  # // (131,072 x 32,768 = 4,294,967,296)
    assert r.max_context == 131_072  # capped by max_position_embeddings
    assert r.verdict == "fits"


def test_llama_8b_decode_and_prefill_ceilings_on_h200() -> None:
    f = facts_from_config(LLAMA_3_1_8B)
    hw = Hardware(find_device("H200"))
    d = decode_bound(f, hw, context=1024)
    # read per token: weights minus the input table 16,060,522,496 - 1,050,673,152 = 15,009,849,344
    # + KV 131,072 x 1024 = 134,217,728 -> 15,144,067,072 B / 4.8e12 B/s = 3.15501e-3 s
    assert d.weight_bytes_per_gpu == 15_009_849_344
    assert d.kv_bytes_per_gpu == 134_217_728
    assert d.per_stream_tok_s == pytest.approx(4.8e12 / 15_144_067_072)  # 316.96 tok/s
    assert d.bound == "memory"
    p = prefill_bound(f, hw, prompt_tokens=8192)
    # matmul P per token: 8,030,261,248 - 2 x 525,336,576 (no lookup table, lm_head only for the last
    # token) = 6,979,588,096 -> x2 = 13,959,176,192; attention: 2 x 32 heads x (128 + 128) x 32 layers
    # x 4096.5 average keys = 2,147,745,792; last-token logits 2 x 525,336,576 / 8192 = 128,256
    assert p.flops_per_token == 16_107_050_240
    assert p.tok_s == pytest.approx(989e12 / 16_107_050_240)  # 61,402 tok/s


def test_llama_70b_kv_split_under_tensor_parallel() -> None:
    f = facts_from_config(LLAMA_3_1_70B)
    assert f.total_params == 70_553_706_496
    # per layer and token: 2 x 8 KV heads x 128 x 2 B = 4,096 B; TP4 -> 2 heads = 1,024 B per GPU;
    # TP8 -> 1 head = 512 B; TP16 cannot split 8 heads: each GPU still holds 1 (replicated)
    assert kv_layer_bytes(f, "auto", tp=1) == 4096
    assert kv_layer_bytes(f, "auto", tp=4) == 1024
    assert kv_layer_bytes(f, "auto", tp=8) == 512
    assert kv_layer_bytes(f, "auto", tp=16) == 512
    assert KvLayout(f, "auto", tp=4).bytes_per_token_per_gpu == 1024 * 80


def test_llama_70b_on_two_4090s_needs_offload() -> None:
    f = facts_from_config(LLAMA_3_1_70B)
    r = fit(f, Hardware(find_device("RTX 4090"), 2), Layout(tp=2), context=8192)
    # budget int(0.9 x 24 GiB) = 23,192,823,398; weights 141,107,412,992 / 2 = 70,553,706,496
    # overhead 1 GiB + 8192 x 2 x (16,384 + (32,768 + 86,016)/2) + 4 x 256 x 128,256 / 2 = 2,380,922,880
    # KV for 8192 tokens: 2 x 4 heads x 128 x 2 B x 80 layers = 163,840 B x 8192 = 1,342,177,280
    # shortfall per GPU: 1,342,177,280 - (23,192,823,398 - 70,553,706,496 - 2,380,922,880) = 51,083,983,258
    assert r.verdict == "fits-with-offload"
    assert r.offload_bytes == 2 * 51_083_983_258
    assert r.weights_bytes_per_gpu == 70_553_706_496 - 51_083_983_258
    assert r.kv_pool_tokens == 8192  # after the move the KV budget is exactly what was needed
    short = fit(f, Hardware(find_device("RTX 4090"), 2, host_ram_bytes=64 * GIB), Layout(tp=2), context=8192)
    assert short.verdict == "does-not-fit"  # 95.15 GiB to offload > 64 GiB of host RAM
    assert any("host RAM" in reason for reason in short.reasons)


# ------------------------------------------------------------------ MoE: Mixtral-8x7B


def test_mixtral_params_active_and_fit() -> None:
    f = facts_from_config(MIXTRAL_8X7B)
    # per layer: attention 41,943,040; 8 experts x 3 x 4096 x 14336 = 8 x 176,160,768 = 1,409,286,144;
    # router 4096 x 8 = 32,768; norms 8,192 -> 1,451,270,144; x 32 = 46,440,644,608
    # + embed and lm_head 2 x 32000 x 4096 = 262,144,000 + final norm 4,096
    assert f.total_params == 46_702_792_704
    # a token uses 2 of 8 experts: minus 32 layers x 6 x 176,160,768 = 33,822,867,456
    assert f.active_params == 12_879_925_248
    assert f.expert_bytes == 2 * 32 * 8 * 176_160_768
    r = fit(f, Hardware(find_device("H100"), 2), Layout(tp=2))
    # budget int(0.9 x 80 GiB) = 77,309,411,328; weights 93,405,585,408 / 2 = 46,702,792,704
    # overhead 1 GiB + 8192 x 2 x (8,192 + (16,384 + 3 x 2 x 14,336)/2) + 4 x 256 x 32000 / 2 = 2,063,204,352
    # KV budget 28,543,414,272; per GPU 4 KV heads: 2 x 4 x 128 x 2 x 32 = 65,536 B/token
    assert r.kv_budget_bytes_per_gpu == 28_543_414_272
    assert r.kv_bytes_per_token_per_gpu == 65_536
    assert r.kv_pool_tokens == 435_537  # 28,543,414,272 // 65,536
    assert r.max_context == 32_768
    assert r.max_concurrency_at_context == 13  # // (65,536 x 32,768 = 2,147,483,648)


def test_mixtral_decode_reads_two_experts_per_token() -> None:
    f = facts_from_config(MIXTRAL_8X7B)
    hw, lay = Hardware(find_device("H100"), 2), Layout(tp=2)
    d = decode_bound(f, hw, lay, context=1024)
    # dense part: 93,405,585,408 - 90,194,313,216 experts - 262,144,000 input table = 2,949,128,192
    # + 2/8 of the experts 22,548,578,304 = 25,497,706,496; per GPU (TP2) 12,748,853,248
    assert d.weight_bytes_per_gpu == 12_748_853_248
    # memory 12,748,853,248 + KV 65,536 x 1024 = 12,815,962,112 B / 3.35e12 B/s
    # NVLink 900 GB/s -> 450e9 per direction; 2 all-reduces x 32 layers x (4096 x 2 B) x 2 x 1/2 = 524,288 B
    assert d.link_s == pytest.approx(524_288 / 450e9)
    assert d.per_stream_tok_s == pytest.approx(1 / (12_815_962_112 / 3.35e12 + 524_288 / 450e9))  # 261.3
    # 8 streams: uniform routing touches 1 - 0.75^8 = 0.899887 of the experts, the strict bound 2/8
    uniform = decode_bound(f, hw, lay, context=1024, concurrency=8)
    strict = decode_bound(f, hw, lay, context=1024, concurrency=8, routing="min")
    assert uniform.weight_bytes_per_gpu == pytest.approx((2_949_128_192 + 90_194_313_216 * (1 - 0.75**8)) / 2)
    assert strict.weight_bytes_per_gpu == d.weight_bytes_per_gpu
    assert strict.aggregate_tok_s > uniform.aggregate_tok_s


# ------------------------------------------------------------------ MLA + MoE + FP8: DeepSeek-V3


def test_deepseek_v3_params() -> None:
    f = facts_from_config(DEEPSEEK_V3)
    # attention per layer: q_a 7168 x 1536 + q_b 1536 x 128 x 192 = 48,758,784; kv_a 7168 x 576 =
    # 4,128,768; kv_b 512 x 128 x 256 = 16,777,216; o 128 x 128 x 7168 = 117,440,512 -> 187,105,280
    # + 2,048 latent norms; x 61 = 11,413,547,008. Dense MLP (3 layers) 3 x 396,361,728 = 1,189,085,184.
    # MoE (58 layers): 256 experts x 3 x 7168 x 2048 (44,040,192) = 11,274,289,152 + shared 44,040,192
    # + router 1,835,008 -> x 58 = 656,569,532,416. Norms 881,664. Embed + head 2 x 926,679,040.
    assert f.total_params == 671_026_404_352
    # inactive: 58 x 248 x 44,040,192 = 633,474,121,728
    assert f.active_params == 37_552_282_624
    assert (f.attention, f.moe_layers, f.n_experts, f.experts_per_token) == ("mla", 58, 256, 8)
    # FP8 with one fp32 scale per 128 x 128 block: 8 + 32/16384 bits on the 669,065,609,216 layer-matrix
    # params = 669,228,955,312 B; lm_head 1,853,358,080 B; embed, norms, routers 1,034,116,096 x 2 B
    assert f.weight_bytes == 673_150_545_584
    assert (f.weight_format, f.compute_format) == ("fp8", "fp8")


def test_deepseek_v3_mla_kv_on_8_h200() -> None:
    f = facts_from_config(DEEPSEEK_V3)
    # MLA caches the latent: (512 + 64) x 2 B x 61 layers = 70,272 B/token; fp8 35,136. It has no head
    # axis, so every TP GPU holds all of it; decode context parallel splits the tokens.
    assert KvLayout(f, "auto").bytes_per_token == 70_272
    assert KvLayout(f, "fp8", tp=8).bytes_per_token_per_gpu == 35_136
    assert KvLayout(f, "fp8", tp=8, dcp=8).bytes_per_token_per_gpu == 4_392
    r = fit(f, Hardware(find_device("H200"), 8), Layout(tp=8, kv_cache_dtype="fp8"))
    # weights ceil(673,150,545,584 / 8) = 84,143,818,198; overhead: ffn = max(18432, 2048 x 9) = 18432
    # -> 1 GiB + 8192 x 2 x (14,336 + (28,672 + 55,296)/8) + 4 x 256 x 129,280 / 8 = 1,497,137,152
    # KV budget 136,257,837,465 - 84,143,818,198 - 1,497,137,152 = 50,616,882,115
    assert r.weights_bytes_per_gpu == 84_143_818_198
    assert r.overhead_bytes_per_gpu == 1_497_137_152
    assert r.kv_pool_tokens == 50_616_882_115 // 35_136  # 1,440,598
    assert r.max_context == 163_840
    assert r.verdict == "fits"


# ------------------------------------------------------------------ sliding window: Gemma-3-27B


def test_gemma3_sliding_layers_and_context() -> None:
    f = facts_from_config(GEMMA_3_27B)  # the language model sits under text_config
    # pattern 6: every 6th layer is global -> 62 // 6 = 10 global, 52 sliding (window 1024)
    assert (f.n_layers, f.sliding_layers, f.sliding_window) == (62, 52, 1024)
    assert f.tied_embeddings and f.embedding_bytes == 0
    # per layer and token: 2 x 16 heads x 128 x 2 B = 8,192 B; global layers 10 x 8,192 = 81,920;
    # sliding 52 x 8,192 = 425,984 (first 1024 tokens only)
    kv = KvLayout(f, "auto")
    assert (kv.full_rate, kv.sliding_rate, kv.bytes_per_token) == (81_920, 425_984, 507_904)
    # 131,072 tokens: 81,920 x 131,072 + 425,984 x 1024 = 10,737,418,240 + 436,207,616
    assert kv.sequence_bytes(131_072) == 11_173_625_856
    # budget 20,364,393,984: 1024 + (20,364,393,984 - 507,904 x 1024) // 81,920 = 1024 + 242,239
    assert kv.max_context(20_364_393_984) == 243_263
    assert kv.pool_tokens(20_364_393_984) == 243_263


def test_gemma3_on_h100() -> None:
    f = facts_from_config(GEMMA_3_27B)
    # params (2 norms a layer counted; Gemma's extra norms are < 0.01%): per layer attention
    # 66,060,288 + MLP 346,816,512 + 10,752 -> x 62 = 25,599,028,224; tied embed 1,409,630,208; 5,376
    assert f.total_params == 27_008_663_808
    r = fit(f, Hardware(find_device("H100")), Layout())
    # overhead 1 GiB + 8192 x 2 x (10,752 + 21,504 + 64,512) + 4 x 256 x 262,208 = 2,927,689,728
    assert r.overhead_bytes_per_gpu == 2_927_689_728
    assert r.kv_budget_bytes_per_gpu == 77_309_411_328 - 54_017_327_616 - 2_927_689_728
    assert r.kv_pool_tokens == 243_263
    assert r.max_concurrency_at_context == 1  # 20,364,393,984 // 11,173,625,856


# ------------------------------------------------------------------ quantized: gpt-oss-120b (MXFP4)


def test_gpt_oss_120b_mxfp4() -> None:
    f = facts_from_config(GPT_OSS_120B)
    # attention per layer: q 2880 x 4096 and o 4096 x 2880 (11,796,480 each), k and v 2880 x 512
    # (1,474,560 each), biases 4096 + 512 + 512 + 2880, sinks 64 -> 26,550,144
    # experts: 128 x (3 x 2880 x 2880 + biases 2 x 2880 + 2880) = 128 x 24,891,840 = 3,186,155,520
    # router 2880 x 128 + 128 = 368,768; norms 5,760 -> layer 3,213,080,192; x 36 = 115,670,886,912
    # + embed and head 2 x 201,088 x 2880 = 1,158,266,880 + final norm 2,880
    assert f.total_params == 116_829_156_672
    assert f.active_params == 116_829_156_672 - 36 * 124 * 24_891_840  # 5,711,982,912
    # MXFP4 experts: 4 bits + one 8-bit scale per 32 = 4.25 bits on 114,661,785,600 matrix params
    # = 60,914,073,600 B (+ expert biases 39,813,120 x 2 B = 79,626,240 -> experts 60,993,699,840 B)
    # the rest bf16: head 1,158,266,880 B, other 1,588,237,632 P x 2 B = 3,176,475,264 B
    assert f.expert_bytes == 60_993_699_840
    assert f.weight_bytes == 65_248_815_744
    assert f.bits_per_weight == pytest.approx(4.468, abs=1e-3)
    assert (f.weight_format, f.compute_format) == ("mxfp4", "fp4")
    # alternate sliding (window 128) and full layers; KV per layer 2 x 8 x 64 x 2 B = 2,048 B
    assert (f.sliding_layers, f.sliding_window) == (18, 128)
    assert KvLayout(f, "auto").bytes_per_token == 36 * 2048


def test_gpt_oss_120b_fits_one_h100_and_decode_ceiling() -> None:
    f = facts_from_config(GPT_OSS_120B)
    hw = Hardware(find_device("H100"))
    r = fit(f, hw, Layout())
    # overhead 1 GiB + 8192 x 2 x (5,760 + 11,520 + 3 x 4 x 2,880) + 4 x 256 x 201,088 = 2,129,002,496
    # KV budget 77,309,411,328 - 65,248,815,744 - 2,129,002,496 = 9,931,593,088
    # pool: (9,931,593,088 - 18 x 2,048 x 128) // (18 x 2,048) = 9,926,874,496 // 36,864 = 269,283
    assert r.kv_budget_bytes_per_gpu == 9_931_593_088
    assert r.kv_pool_tokens == 269_283
    assert r.verdict == "fits"
    d = decode_bound(f, hw, context=1024)
    # dense 65,248,815,744 - 60,993,699,840 - 1,158,266,880 (input table) = 3,096,849,024
    # + 4/128 of experts 1,906,053,120 = 5,002,902,144; KV 36,864 x 1024 + 36,864 x 128 = 42,467,328
    assert d.weight_bytes_per_gpu == 5_002_902_144
    assert d.kv_bytes_per_gpu == 42_467_328
    assert d.per_stream_tok_s == pytest.approx(3.35e12 / 5_045_369_472)  # 663.98 tok/s


def test_awq_4bit_qwen2_5_7b() -> None:
    f = facts_from_config(QWEN2_5_7B_AWQ)
    # layer matrices: 28 x (q 3584^2 + k, v 3584 x 512 + o 3584^2 + MLP 3 x 3584 x 18944) = 6,525,288,448 P
    # AWQ 4-bit, group 128: 4 + (16-bit scale + 4-bit zero)/128 = 4.15625 bits -> 3,390,091,264 B
    # lm_head 544,997,376 x 2 B; embed + qkv biases + norms 545,330,688 x 2 B
    assert f.total_params == 7_615_616_512
    assert f.weight_bytes == 5_570_747_392
    assert f.weight_format == "awq-4bit" and f.sliding_layers == 0  # use_sliding_window: false
