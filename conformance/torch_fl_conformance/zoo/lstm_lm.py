"""An LSTM language model (Zaremba et al., 2014 style): token embedding,
dropout, a two-layer ``nn.LSTM``, dropout and a linear head predicting the next
token with cross-entropy. On a non-CPU device ``nn.LSTM`` runs one fused cell
per step (``aten::_thnn_fused_lstm_cell``) and its backward
(``aten::_thnn_fused_lstm_cell_backward_impl``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ._spec import ModelSpec, Tolerances
from .tape import Dropout

__all__ = ["SPEC", "LSTMLanguageModel"]

VOCAB = 512
EMBED = 64
HIDDEN = 128
LAYERS = 2
BATCH = 4
SEQ = 24
DROPOUT = 0.2


class LSTMLanguageModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, EMBED)
        self.dropout_in = Dropout(DROPOUT)
        # Dropout between the LSTM layers would draw inside the LSTM op, where a
        # parity run cannot replay it; the dropouts around it stay.
        self.lstm = nn.LSTM(EMBED, HIDDEN, num_layers=LAYERS, batch_first=True)
        self.dropout_out = Dropout(DROPOUT)
        self.head = nn.Linear(HIDDEN, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(self.dropout_in(self.embed(tokens)))
        return self.head(self.dropout_out(out))


def _build() -> nn.Module:
    return LSTMLanguageModel()


def _make_batch(seed: int) -> tuple[tuple[Any, ...], Any]:
    g = torch.Generator().manual_seed(seed)
    # A corpus with structure: each sequence counts up from a random start,
    # with a little noise, so the loss has something to learn.
    start = torch.randint(0, VOCAB, (BATCH, 1), generator=g)
    seq = (start + torch.arange(SEQ + 1)[None, :]) % VOCAB
    noise = torch.rand(BATCH, SEQ + 1, generator=g) < 0.1
    seq = torch.where(noise, torch.randint(0, VOCAB, (BATCH, SEQ + 1), generator=g), seq)
    return (seq[:, :-1],), seq[:, 1:]


def _loss(model: nn.Module, inputs: tuple[Any, ...], target: Any) -> torch.Tensor:
    logits = model(*inputs)
    return F.cross_entropy(logits.reshape(-1, VOCAB), target.reshape(-1))


def _optimizer(params: Iterable[nn.Parameter], device_type: str) -> torch.optim.Optimizer:
    return torch.optim.Adam(params, lr=2e-3, fused=True)


SPEC = ModelSpec(
    name="lstm_lm",
    family="sequence",
    description="LSTM language model (embedding 64, 2-layer nn.LSTM hidden 128, linear head), "
    "4x24 tokens, vocabulary 512, next-token cross-entropy, fused Adam",
    build=_build,
    make_batch=_make_batch,
    loss_fn=_loss,
    make_optimizer=_optimizer,
    amp_dtype=None,
    tolerances=Tolerances(),
)
