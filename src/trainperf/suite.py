"""Suites: named lists of cases. For now the default suite that ``trainperf run`` runs.

The default is sized to the hardware found:
- on a CPU, small images and short sequences, batch sizes and a time budget per case that
  finish the whole suite within about three minutes on two cores;
- on a GPU, the literature's settings: ResNet-50 at 224x224 with batch 128 (fp32) and 256
  (bf16, channels-last), BERT-base on SQuAD (sequence 384, batch 32) and GPT-2 small with
  its full 1024-token context.
"""

from __future__ import annotations

from trainperf.case import Case

# ±2% in at most 15 s of measuring per case keeps the CPU suite within its time budget.
CPU_STEPS = "adaptive:0.02:500:15"


def default_cases(device: str) -> list[Case]:
    """The default suite for a machine whose best device is ``device`` ("cpu" or "cuda")."""
    if device == "cuda":
        return [
            Case(model="resnet50", batch_size=128, precision="fp32", device="cuda"),
            Case(
                model="resnet50",
                batch_size=256,
                precision="bf16",
                device="cuda",
                channels_last=True,
            ),
            Case(model="bert-squad", batch_size=32, precision="bf16", device="cuda"),
            Case(model="gpt2-small", batch_size=8, precision="bf16", device="cuda"),
        ]
    return [
        Case(model="cifarnet", batch_size=64, device="cpu", steps=CPU_STEPS),
        Case(model="resnet18", batch_size=16, image_size=64, device="cpu", steps=CPU_STEPS),
        Case(model="resnet50", batch_size=8, image_size=64, device="cpu", steps=CPU_STEPS),
        Case(model="bert-squad", batch_size=4, seq_len=64, device="cpu", steps=CPU_STEPS),
        Case(model="gpt2-small", batch_size=2, seq_len=64, device="cpu", steps=CPU_STEPS),
    ]
