#!/usr/bin/python3
"""bert_profile: the analytic profile of a BERT encoder, as bert_base_layers.csv has it.

bert_base_layers.csv came with the shared workload inputs, made by an analytic FLOP model
(its header: B=32, S=128, fp32, GEMMs at 12 TFLOP/s, memory-bound ops at 700 GB/s,
V100-class). This script is that model written out, checked by regenerating bert_base
(`--check`: every row equal to the shipped file), and used to make bert_large the same way:

    bench/workloads/bert_profile.py --check bench/workloads/bert_base_layers.csv
    bench/workloads/bert_profile.py --model bert_large > bench/workloads/bert_large_layers.csv

The model, per row (T = B x S tokens, H hidden, F = 4H feed-forward, A heads, d = H / A):
  - GEMM rows: 2 x rows x in x out FLOPs at 12 TFLOP/s;
  - memory-bound passes at 700 GB/s: each residual + bias + dropout + LayerNorm block is 12
    passes over a T x H float32 tensor; GELU is 2 passes over T x F; the attention core
    (QK^T and x V: 2 x 2 x B x A x S x S x d FLOPs) adds 4 passes over the B x A x S x S
    scores (softmax and dropout, read and write);
  - the embeddings: 12 passes over T x H forward (three gathers, the sum, LayerNorm);
    backward 0.350 / 0.216 of forward, the ratio bert_base's file has (scatter-adds);
  - every other backward is twice its forward (two GEMMs per forward GEMM);
  - the pooler: one B x H x H GEMM (the CLS token only).
Parameters are PyTorch's (HuggingFace BertModel's tensors, with the pooler). bert_large
(Devlin et al. 2019: 24 layers, H 1024, 16 heads) has 335,141,888 of them, the published
count for BertModel with its pooler.
"""

import argparse
import sys

GEMM_FLOPS = 12e12
MEMORY_BYTES = 700e9
B, S = 32, 128
MODELS = {
    "bert_base": {"layers": 12, "hidden": 768, "heads": 12},
    "bert_large": {"layers": 24, "hidden": 1024, "heads": 16},
}
VOCAB, POSITIONS, TYPES = 30522, 512, 2


def ms(flops=0.0, bytes_moved=0.0):
    return 1e3 * (flops / GEMM_FLOPS + bytes_moved / MEMORY_BYTES)


def rows(model):
    m = MODELS[model]
    h, layers, heads = m["hidden"], m["layers"], m["heads"]
    f, t, d = 4 * h, B * S, h // heads
    block = 12 * t * h * 4  # residual + bias + dropout + LayerNorm
    scores = B * heads * S * S * 4
    out = [("pooler.dense", h * h + h, 2, ms(2 * B * h * h))]
    for layer in reversed(range(layers)):  # backprop order: the last layer first
        out += [
            ("L%d.ffn2+LN" % layer, f * h + h + 2 * h, 4, ms(2 * t * f * h, block)),
            ("L%d.ffn1" % layer, h * f + f, 2, ms(2 * t * h * f, 2 * t * f * 4)),
            ("L%d.attn_out+LN" % layer, h * h + h + 2 * h, 4, ms(2 * t * h * h, block)),
            ("L%d.qkv" % layer, 3 * (h * h + h), 6,
             ms(3 * 2 * t * h * h + 2 * 2 * B * heads * S * S * d, 4 * scores)),
        ]
    embeddings = (VOCAB + POSITIONS + TYPES) * h + 2 * h
    out.append(("embeddings", embeddings, 5, ms(0, block)))
    table = []
    for i, (name, params, ntensors, fwd) in enumerate(out, 1):
        bwd = fwd * 0.350 / 0.216 if name == "embeddings" else 2 * fwd
        table.append((i, name, params, 4 * params, ntensors, round(fwd, 3), round(bwd, 3)))
    return table


def write(model, f):
    f.write("# %s: rows in backprop (gradient-ready) order; times in ms; source: analytic FLOP "
            "model: B=%d,S=%d,fp32; GEMM 12 TFLOP/s, memory-bound ops 700 GB/s (V100-class); "
            "bench/workloads/bert_profile.py\n" % (model, B, S))
    f.write("row,name,params,bytes,ntensors,fwd_ms,bwd_ms\n")
    for r in rows(model):
        f.write("%d,%s,%d,%d,%d,%.3f,%.3f\n" % r)


def check(path):
    """Regenerates bert_base and compares it with `path` row by row (times within 0.0011 ms:
    the file rounds to 3 decimals)."""
    shipped = [line.strip().split(",") for line in open(path) if line[0].isdigit()]
    made = rows("bert_base")
    assert len(shipped) == len(made), (len(shipped), len(made))
    worst = 0.0
    for s, m in zip(shipped, made):
        assert s[1] == m[1] and int(s[2]) == m[2] and int(s[3]) == m[3], (s, m)
        worst = max(worst, abs(float(s[5]) - m[5]), abs(float(s[6]) - m[6]))
    assert worst <= 0.0011, worst
    print("bert_profile: %d rows of %s regenerated; largest time difference %.4f ms"
          % (len(made), path, worst))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=sorted(MODELS), default="bert_large")
    p.add_argument("--check", metavar="BERT_BASE_CSV", help="compare bert_base with this file")
    args = p.parse_args()
    if args.check:
        check(args.check)
    else:
        write(args.model, sys.stdout)


if __name__ == "__main__":
    main()
